// quant8.h: bitsandbytes' dynamic 8-bit blockwise quantization, as its 8-bit optimizers keep
// their moments. The maps and the block codecs live in kernels/quant_maps.h (NF4's double
// quantization uses the same signed map); the optimizers name them here as they always have.
#pragma once
#include "kernels/quant_maps.h"

namespace zt::optim {

using kernels::dequantize_block;
using kernels::kDynamicSigned;
using kernels::kDynamicUnsigned;
using kernels::quantize_block;
using kernels::quantize_nearest;

}  // namespace zt::optim
