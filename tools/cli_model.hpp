// Tensor access for the file subcommands (inspect, dequant, matmul-id, run,
// quantize): one handle over a GGUF file or a safetensors checkpoint, and the
// NVFP4 / float readers the subcommands share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cli {

enum class FileKind { kGguf, kSafetensors, kNpy };

// By content (GGUF and .npy magic), else safetensors (a .safetensors file, an
// index .json or a directory). A missing path is an error naming it.
Status detect_file_kind(const std::string& path, FileKind* out);

struct ModelFile {
  std::string path;
  bool is_gguf = false;
  io::GgufFile gguf;                   // when is_gguf
  io::SafetensorsCheckpoint checkpoint;  // otherwise

  static Status open(const std::string& path, ModelFile* out);
  bool has_tensor(const std::string& name) const;
  // A few names, for "no tensor 'x'; tensors include ..." messages.
  std::string some_tensor_names(size_t max_names = 8) const;
};

// "FILE:TENSOR", split at the last ':' (tensor names never contain one, paths
// may). option names the argument in errors.
Status split_file_tensor(const std::string& arg, const std::string& option, std::string* file, std::string* tensor);

// NVFP4 expert weights named by `tensor`:
//  - GGUF: an NVFP4 tensor of ne = [K, N, E] (or [K, N]: one expert);
//  - safetensors (ModelOpt): "<name>.weight" U8 [N, K/2] with its
//    "<name>.weight_scale" F8_E4M3 [N, K/16]; a '*' in the name stands for the
//    expert index 0, 1, ... (as many as exist), e.g.
//    model.layers.0.mlp.experts.*.gate_proj.weight.
// alpha is left empty (= 1): the second-level scale is applied only on request.
Status read_nvfp4_experts(const ModelFile& f, const std::string& tensor, ExpertWeights* out);
// True when read_nvfp4_experts would take `tensor` as NVFP4.
bool is_nvfp4_tensor(const ModelFile& f, const std::string& tensor);

// Float values in row-major order and their numpy shape. F32/F16/BF16 (and F64
// for safetensors) convert; NVFP4 is dequantized exactly without its
// second-level scale. A '*' stacks experts (safetensors), adding a leading
// dimension E.
Status read_float_tensor(const ModelFile& f, const std::string& tensor, std::vector<float>* values,
                         std::vector<int64_t>* shape);

// The per-expert second-level scale the file pairs with an NVFP4 weight (GGUF
// "<base>.scale", ModelOpt "<name>.weight_scale_2"), or "" when there is none.
std::string companion_scale_name(const ModelFile& f, const std::string& tensor);

// Control characters and non-ASCII bytes of names read from files escaped, so
// a hostile file cannot drive the terminal.
std::string printable(const std::string& s);

}  // namespace nvfp4moe::cli
