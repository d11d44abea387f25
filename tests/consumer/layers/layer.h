// The consumer's own layers/layer.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's layers/layer.h instead of its own"
#endif
inline constexpr int consumer_layers_layer_h = 1;
