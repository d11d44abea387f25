// The consumer's own layers/model/sequential.h (where Ember keeps its own since the model layer
// moved there): were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's layers/model/sequential.h instead of its own"
#endif
inline constexpr int consumer_layers_model_sequential_h = 1;
