// tdsl emulator stand-in for <mma.h>: everything is in cuda_emu.h
#pragma once
#include "cuda_emu.h"
