/// @file
/// distribute/'s public headers: collectives and the data-parallel strategies.
/// ember.h includes this umbrella; a new public header of distribute/ is added here.
#pragma once

#include "communicator.h"
#include "strategy.h"
