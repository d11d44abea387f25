// The consumer's own data/dataloader.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's data/dataloader.h instead of its own"
#endif
inline constexpr int consumer_data_dataloader_h = 1;
