// EMBER_NCCL_CHECK: NCCL's check macro (see check.h). Only in builds with NCCL.
#pragma once

#include <nccl.h>

#include "check.h"

#define EMBER_NCCL_CHECK(stmt)                                                                   \
  EMBER_LIB_CHECK_("NCCL", ::ember::NcclError, stmt, ncclResult_t, ember_status_ == ncclSuccess, \
                   std::string(ncclGetErrorString(ember_status_)) + " (" + ncclGetLastError(nullptr) + ")")
