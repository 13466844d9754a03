// The C ABI of the mask language (include/attnjit/attnjit.h): attnjit_mask_parse over
// dsl::compile_mask, and the attnjit_host_mask handles over attnjit::build_host_mask
// (include/attnjit/masks.hpp), whose interval form becomes an attnjit_intervals handle.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnjit/attnjit.h"
#include "attnjit/masks.hpp"
#include "dsl/mask_expr.hpp"
#include "dsl/mask_lang.hpp"
#include "jit/c_api/c_api_intervals.hpp"
#include "jit/c_api/c_api_support.hpp"

struct attnjit_host_mask {
  attnjit::HostMask mask;
  int batch = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;
};

namespace {

using attnjit::c_api::copy_out;
using attnjit::c_api::guarded;
using attnjit::c_api::require;

constexpr int kMaxBatch = 65535;  // the kernels' grid limit
constexpr int kMaxHostTensors = 1024;

// The names of the tensors `e` reads (predicates' tensors, families' tensor parameters), in
// order of first appearance.
void collect_tensors(const attnjit::dsl::MaskExpr& e, std::vector<std::string>& names) {
  const auto add = [&](const std::string& name) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  if (e.kind == attnjit::dsl::MaskExpr::Kind::predicate) {
    for (const std::string& name : attnjit::info(e.predicate).tensors) add(name);
  }
  for (const attnjit::dsl::FamilyArg& arg : e.args) {
    if (arg.kind == attnjit::dsl::FamilyArg::Kind::tensor) add(arg.tensor);
  }
  for (const attnjit::dsl::MaskExpr& operand : e.operands) collect_tensors(operand, names);
}

// The spec's mask as the kernel signature spells it: a predicate lifted, without its values.
std::string structure_text(attnjit::MaskSpec spec) {
  spec.scalars.clear();
  return attnjit::to_string(spec);
}

std::string_view form_of(const attnjit::MaskSpec& spec) {
  return attnjit::info_of(spec.kind).form;
}

std::vector<attnjit::HostTensor> host_tensors(const attnjit_host_tensor* tensors, int count) {
  if (count < 0 || count > kMaxHostTensors) {
    attnjit::throw_field_error("tensor_count", std::to_string(count),
                               fmt::format("0 to {}", kMaxHostTensors));
  }
  require(tensors != nullptr || count == 0, "tensors",
          fmt::format("an array of {} attnjit_host_tensor (NULL only with a count of 0)", count));
  std::vector<attnjit::HostTensor> out;
  for (int i = 0; i < count; ++i) {
    const attnjit_host_tensor& t = tensors[i];
    require(t.name != nullptr, fmt::format("tensors[{}].name", i), "a tensor name");
    const std::string field = fmt::format("tensor {}", t.name);
    if (t.rows < 1) attnjit::throw_field_error(field + " rows", std::to_string(t.rows), ">= 1");
    if (t.length < 0) {
      attnjit::throw_field_error(field + " length", std::to_string(t.length), ">= 0");
    }
    const std::int64_t values = std::int64_t{t.rows} * t.length;
    if (values > INT32_MAX) {
      attnjit::throw_field_error(field + " rows * length", std::to_string(values),
                                 "at most 2^31 - 1 values");
    }
    require(t.values != nullptr || values == 0, field + " values",
            fmt::format("{} int32 values (rows * length)", values));
    out.push_back(
        {t.name, t.rows, t.length, std::vector<std::int32_t>(t.values, t.values + values)});
  }
  return out;
}

void check_sizes(int batch, int seqlen_q, int seqlen_k) {
  if (batch < 1 || batch > kMaxBatch) {
    attnjit::throw_field_error("batch", std::to_string(batch), fmt::format("1 to {}", kMaxBatch));
  }
  if (seqlen_q < 1) attnjit::throw_field_error("seqlen_q", std::to_string(seqlen_q), ">= 1");
  if (seqlen_k < 1) attnjit::throw_field_error("seqlen_k", std::to_string(seqlen_k), ">= 1");
  if (std::int64_t{batch} * std::max(seqlen_q, seqlen_k) > INT32_MAX) {
    throw attnjit::Error(
        fmt::format("batch x seqlen: got {} x {}; accepted: at most 2^31 - 1 tokens over the batch",
                    batch, std::max(seqlen_q, seqlen_k)));
  }
}

const attnjit_host_mask& required(const attnjit_host_mask* mask) {
  require(mask != nullptr, "mask", "a handle from attnjit_host_mask_build");
  return *mask;
}

}  // namespace

extern "C" {

int attnjit_mask_parse(const char* expression, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    require(expression != nullptr, "expression", "a mask expression such as 'document([4,3,3])'");
    const attnjit::dsl::MaskExpr parsed = attnjit::dsl::parse_mask_expr(expression);
    const attnjit::dsl::MaskProgram program = attnjit::dsl::compile_mask(expression);
    std::vector<std::string> tensors;
    collect_tensors(parsed, tensors);
    const nlohmann::ordered_json object = {
        {"form", form_of(program.spec)},
        {"mask", structure_text(program.spec)},
        {"scalars", program.scalars},
        {"tensors", tensors},
        {"element", parsed.kind == attnjit::dsl::MaskExpr::Kind::predicate}};
    result = copy_out(object.dump(), buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_host_mask_build(const char* expression, int batch, int seqlen_q, int seqlen_k,
                            const attnjit_host_tensor* tensors, int tensor_count,
                            attnjit_host_mask** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "out", "a pointer to an attnjit_host_mask* to fill");
    require(expression != nullptr, "expression", "a mask expression such as 'document([4,3,3])'");
    check_sizes(batch, seqlen_q, seqlen_k);
    const std::vector<attnjit::HostTensor> inputs = host_tensors(tensors, tensor_count);
    auto handle = std::make_unique<attnjit_host_mask>();
    handle->mask = attnjit::build_host_mask(expression, batch, seqlen_q, seqlen_k, inputs);
    handle->batch = batch;
    handle->seqlen_q = seqlen_q;
    handle->seqlen_k = seqlen_k;
    *out = handle.release();
  });
}

int attnjit_host_mask_info(const attnjit_host_mask* mask, char* buffer, size_t size) {
  int result = ATTNJIT_OK;
  const int status = guarded([&] {
    const attnjit_host_mask& m = required(mask);
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const attnjit::HostTensor& t : m.mask.tensors) {
      tensors.push_back({{"name", t.name}, {"rows", t.rows}, {"length", t.length}});
    }
    const nlohmann::ordered_json object = {{"form", form_of(m.mask.spec)},
                                           {"mask", structure_text(m.mask.spec)},
                                           {"scalars", m.mask.spec.scalars},
                                           {"predicate", m.mask.spec.predicate},
                                           {"batch", m.batch},
                                           {"seqlen_q", m.seqlen_q},
                                           {"seqlen_k", m.seqlen_k},
                                           {"tensors", std::move(tensors)}};
    result = copy_out(object.dump(), buffer, size);
  });
  return status != ATTNJIT_OK ? status : result;
}

int attnjit_host_mask_intervals(const attnjit_host_mask* mask, attnjit_intervals** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require(out != nullptr, "out", "a pointer to an attnjit_intervals* to fill");
    const attnjit_host_mask& m = required(mask);
    if (!m.mask.intervals) {
      attnjit::throw_field_error("mask", structure_text(m.mask.spec),
                                 "a mask of the intervals form (flashmask)");
    }
    const attnjit::HostIntervals& v = *m.mask.intervals;
    *out = new attnjit_intervals{
        {v.causal, v.columns, v.batch, v.heads, v.seqlen_q, v.seqlen_k, v.data}};
  });
}

int attnjit_host_mask_tensor(const attnjit_host_mask* mask, int index,
                             const std::int32_t** values) {
  return guarded([&] {
    const attnjit_host_mask& m = required(mask);
    require(values != nullptr, "values", "a pointer to a const int32_t* to fill");
    const std::size_t count = m.mask.tensors.size();
    if (index < 0 || static_cast<std::size_t>(index) >= count) {
      attnjit::throw_field_error(
          "index", std::to_string(index),
          fmt::format("0 to {} (the mask has {} tensors)", static_cast<int>(count) - 1, count));
    }
    *values = m.mask.tensors[static_cast<std::size_t>(index)].values.data();
  });
}

void attnjit_host_mask_release(attnjit_host_mask* mask) {
  delete mask;
}

}  // extern "C"
