// GELU activation, in place. The form comes from the model's config:
// nanoGPT uses the exact erf form, Hugging Face GPT-2 "gelu_new" the tanh one.
#pragma once

namespace kvtier::kernels {

// x = 0.5 x (1 + erf(x / sqrt 2)), n elements.
void gelu_erf(float* x, long n);

// x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), n elements.
void gelu_tanh(float* x, long n);

}  // namespace kvtier::kernels
