// The consumer's own core/shape.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's core/shape.h instead of its own"
#endif
inline constexpr int consumer_core_shape_h = 1;
