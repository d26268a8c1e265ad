// Emulator stub (see ../emu_runtime.h): the CPU model stands in for the real header.
#pragma once
#include "../emu_runtime.h"
