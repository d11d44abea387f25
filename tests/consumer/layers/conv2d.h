// The consumer's own layers/conv2d.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's layers/conv2d.h instead of its own"
#endif
inline constexpr int consumer_layers_conv2d_h = 1;
