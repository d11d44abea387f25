// The consumer's own core/device.h: were Ember to pick it up in place of its own, compiling would stop here.
#pragma once
#ifndef CONSUMER_OWN_HEADERS_OK
#error "Ember included the consumer's core/device.h instead of its own"
#endif
inline constexpr int consumer_core_device_h = 1;
