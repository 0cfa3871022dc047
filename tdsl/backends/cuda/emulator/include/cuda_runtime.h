// tdsl emulator stand-in for <cuda_runtime.h>: everything is in cuda_emu.h
#pragma once
#include "cuda_emu.h"
