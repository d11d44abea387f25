/// @file
/// data/'s public headers: IDX, MNIST and text readers, datasets, the batch loader.
/// ember.h includes this umbrella; a new public header of data/ is added here.
#pragma once

#include "csv.h"
#include "dataloader.h"
#include "dataset.h"
#include "idx.h"
#include "mnist.h"
#include "text.h"
