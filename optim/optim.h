/// @file
/// optim/'s public headers: the optimizers.
/// ember.h includes this umbrella; a new public header of optim/ is added here.
#pragma once

#include "adam.h"
#include "optimizer.h"
#include "rmsprop.h"
#include "sgd.h"
