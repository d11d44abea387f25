// The consumer's own data/dataset.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's data/dataset.h instead of its own"
#endif
inline constexpr int consumer_data_dataset_h = 1;
