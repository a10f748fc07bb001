//go:build amd64 && !noasm

#include "textflag.h"
#include "q8group_amd64.h"

#define X8NAME ·dotQ8X8AVX
#include "q8x8_amd64.h"
