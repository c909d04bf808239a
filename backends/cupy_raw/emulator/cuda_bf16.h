// cuda_bf16.h for the CPU emulator: the types and conversions are in emulator.hpp, included first.
#pragma once
