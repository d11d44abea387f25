// The consumer's own layers/sequential.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's layers/sequential.h instead of its own"
#endif
inline constexpr int consumer_layers_sequential_h = 1;
