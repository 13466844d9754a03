// The C ABI's mask language (attnjit_mask_parse, attnjit_host_mask_*) with its bounds checks,
// and the kernel-side entry points that go with lifted literals: the predicate scalars of
// attnjit_kernel_info and the PTX of attnjit_kernel_ptx.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "attnjit/attnjit.h"
#include "runtime/jit/driver.hpp"

namespace {

// The text of a function with attnjit.h's size protocol; "" when it fails.
template <typename Function, typename... Args>
std::string text_of(Function function, Args... args) {
  const int needed = function(args..., nullptr, 0);
  if (needed <= ATTNJIT_INTERNAL_ERROR) return "";
  std::string text(static_cast<std::size_t>(needed), '\0');
  REQUIRE(function(args..., text.data(), text.size()) == ATTNJIT_OK);
  text.resize(text.size() - 1);
  return text;
}

std::string last_error() {
  return attnjit_last_error();
}

}  // namespace

TEST_CASE("attnjit_mask_parse gives the form, the lifted mask and the tensors read", "[dsl]") {
  const auto union_ =
      nlohmann::json::parse(text_of(attnjit_mask_parse, "document([4,3,3]) | sliding_window(2)"));
  CHECK(union_["form"] == "predicate");
  CHECK(union_["mask"] == "predicate(_doc0[q]==_doc0[k]||q>=k&&q-k<$0)");
  CHECK(union_["scalars"] == std::vector<int>{2});
  CHECK(union_["tensors"].empty());
  CHECK(union_["element"] == false);

  const auto element =
      nlohmann::json::parse(text_of(attnjit_mask_parse, "q >= k && doc[q] == doc[k]"));
  CHECK(element["form"] == "intervals");
  CHECK(element["mask"] == "flashmask(causal=true,columns=1)");
  CHECK(element["tensors"] == std::vector<std::string>{"doc"});
  CHECK(element["element"] == true);
  CHECK(nlohmann::json::parse(text_of(attnjit_mask_parse, "causal_document(len)"))["tensors"] ==
        std::vector<std::string>{"len"});

  char buffer[64];
  CHECK(attnjit_mask_parse("document([4,3,3]) |", buffer, sizeof buffer) == ATTNJIT_USER_ERROR);
  CHECK_THAT(last_error(), Catch::Contains("line 1 column 20"));
  CHECK(attnjit_mask_parse(nullptr, buffer, sizeof buffer) == ATTNJIT_USER_ERROR);
}

TEST_CASE("attnjit_host_mask_build builds each form and checks every size", "[dsl]") {
  attnjit_host_mask* mask = nullptr;
  REQUIRE(attnjit_host_mask_build("document([4,3,3])", 1, 10, 10, nullptr, 0, &mask) == ATTNJIT_OK);
  const auto info = nlohmann::json::parse(text_of(attnjit_host_mask_info, mask));
  CHECK(info["form"] == "intervals");
  CHECK(info["mask"] == "flashmask(causal=false,columns=2)");
  CHECK(info["batch"] == 1);
  attnjit_intervals* intervals = nullptr;
  REQUIRE(attnjit_host_mask_intervals(mask, &intervals) == ATTNJIT_OK);
  attnjit_intervals_shape shape{};
  REQUIRE(attnjit_intervals_get_shape(intervals, &shape) == ATTNJIT_OK);
  CHECK(shape.columns == 2);
  CHECK(shape.seqlen_k == 10);
  CHECK(attnjit_intervals_data(intervals)[0] == 4);
  attnjit_intervals_release(intervals);
  const std::int32_t* values = nullptr;
  CHECK(attnjit_host_mask_tensor(mask, 0, &values) == ATTNJIT_USER_ERROR);
  CHECK_THAT(last_error(), Catch::Contains("the mask has 0 tensors"));
  attnjit_host_mask_release(mask);

  const std::vector<std::int32_t> doc{0, 0, 1, 1, 1, 2};
  const attnjit_host_tensor tensor{"doc", doc.data(), 1, 6};
  REQUIRE(attnjit_host_mask_build("(doc[q] == doc[k]) | (q - k == 3)", 2, 6, 6, &tensor, 1,
                                  &mask) == ATTNJIT_OK);
  const auto predicate = nlohmann::json::parse(text_of(attnjit_host_mask_info, mask));
  CHECK(predicate["form"] == "predicate");
  CHECK(predicate["predicate"] == "doc[q]==doc[k]||q-k==$0");
  CHECK(predicate["scalars"] == std::vector<int>{3});
  REQUIRE(predicate["tensors"].size() == 1);
  CHECK(predicate["tensors"][0]["name"] == "doc");
  REQUIRE(attnjit_host_mask_tensor(mask, 0, &values) == ATTNJIT_OK);
  CHECK(std::vector<std::int32_t>(values, values + 6) == doc);
  CHECK(attnjit_host_mask_intervals(mask, &intervals) == ATTNJIT_USER_ERROR);
  CHECK(intervals == nullptr);
  attnjit_host_mask_release(mask);

  const auto refused = [&](int batch, int sq, int sk, const attnjit_host_tensor* tensors,
                           int count) {
    attnjit_host_mask* out = reinterpret_cast<attnjit_host_mask*>(0x1);
    const int code = attnjit_host_mask_build("causal", batch, sq, sk, tensors, count, &out);
    if (code == ATTNJIT_OK) {
      attnjit_host_mask_release(out);
      return std::string("accepted");
    }
    CHECK(out == nullptr);
    return last_error();
  };
  CHECK_THAT(refused(0, 4, 4, nullptr, 0), Catch::Contains("batch: got '0'; accepted: 1 to 65535"));
  CHECK_THAT(refused(70000, 4, 4, nullptr, 0), Catch::Contains("batch: got '70000'"));
  CHECK_THAT(refused(1, 0, 4, nullptr, 0), Catch::Contains("seqlen_q: got '0'"));
  CHECK_THAT(refused(1, 4, -1, nullptr, 0), Catch::Contains("seqlen_k: got '-1'"));
  CHECK_THAT(refused(65535, 1 << 20, 4, nullptr, 0), Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THAT(refused(1, 4, 4, nullptr, 1), Catch::Contains("tensors: got 'NULL'"));
  CHECK_THAT(refused(1, 4, 4, &tensor, -1), Catch::Contains("tensor_count: got '-1'"));
  CHECK_THAT(refused(1, 4, 4, &tensor, 5000), Catch::Contains("tensor_count: got '5000'"));
  attnjit_host_tensor bad = tensor;
  bad.rows = 0;
  CHECK_THAT(refused(1, 4, 4, &bad, 1), Catch::Contains("tensor doc rows: got '0'"));
  bad = tensor;
  bad.length = -2;
  CHECK_THAT(refused(1, 4, 4, &bad, 1), Catch::Contains("tensor doc length: got '-2'"));
  bad = tensor;
  bad.rows = 1 << 16;
  bad.length = 1 << 16;
  CHECK_THAT(refused(1, 4, 4, &bad, 1), Catch::Contains("at most 2^31 - 1 values"));
  bad = tensor;
  bad.values = nullptr;
  CHECK_THAT(refused(1, 4, 4, &bad, 1), Catch::Contains("tensor doc values: got 'NULL'"));
  bad = tensor;
  bad.name = nullptr;
  CHECK_THAT(refused(1, 4, 4, &bad, 1), Catch::Contains("tensors[0].name: got 'NULL'"));
  CHECK(refused(1, 4, 4, &tensor, 1) == "accepted");
  CHECK(attnjit_host_mask_build("causal", 1, 4, 4, nullptr, 0, nullptr) == ATTNJIT_USER_ERROR);
  char buffer[8];
  CHECK(attnjit_host_mask_info(nullptr, buffer, sizeof buffer) == ATTNJIT_USER_ERROR);
  attnjit_host_mask_release(nullptr);
}

TEST_CASE("a kernel's predicate scalars and PTX through the C ABI", "[runtime]") {
  attnjit_kernel* kernel = nullptr;
  REQUIRE(attnjit_compile("dtype=bf16 head_dim=64 mask=predicate(q>=k&&(q-k)<256) target=sm_80",
                          &kernel) == ATTNJIT_OK);
  const auto info = nlohmann::json::parse(text_of(attnjit_kernel_info, kernel));
  CHECK(info["predicate_scalars"] == std::vector<int>{256});
  CHECK_THAT(info["spec"].get<std::string>(), Catch::Contains("mask=predicate(q>=k&&q-k<$0)"));
  const std::size_t count = info["kernels"].size();
  REQUIRE(count == 3);
  for (int i = 0; i < static_cast<int>(count); ++i) {
    const std::string ptx = text_of(attnjit_kernel_ptx, kernel, i);
    CHECK_THAT(ptx, Catch::Contains(".entry " + info["kernels"][i]["name"].get<std::string>()));
  }
  char buffer[8];
  CHECK(attnjit_kernel_ptx(kernel, 3, buffer, sizeof buffer) == ATTNJIT_USER_ERROR);
  CHECK_THAT(last_error(), Catch::Contains("index: got '3'; accepted: 0 to 2"));
  CHECK(attnjit_kernel_ptx(kernel, -1, buffer, sizeof buffer) == ATTNJIT_USER_ERROR);
  CHECK(attnjit_kernel_ptx(nullptr, 0, buffer, sizeof buffer) == ATTNJIT_USER_ERROR);

  if (!attnjit::runtime::driver_available()) {
    // A launch without scalars takes the literals: its checks pass up to the device.
    attnjit_tensor q{reinterpret_cast<void*>(0x10000),
                     ATTNJIT_BF16,
                     4,
                     {1, 64, 2, 64},
                     {64 * 2 * 64, 2 * 64, 64, 1}};
    attnjit_tensor o = q;
    o.data = reinterpret_cast<void*>(0x20000);
    const attnjit_predicate_inputs none{nullptr, 0, nullptr, nullptr, 0};
    CHECK(attnjit_forward_predicate(kernel, &q, &q, &q, &o, nullptr, &none, 0.0f, 0.0f, nullptr,
                                    nullptr) == ATTNJIT_DEVICE_ERROR);
  }
  attnjit_release(kernel);
}
