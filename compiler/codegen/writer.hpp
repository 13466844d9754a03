// SourceWriter: builds generated source in an fmt memory buffer with indentation.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace attnjit {

class SourceWriter {
 public:
  /// Writes one line at the current indentation.
  template <class... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    for (int i = 0; i < depth_; ++i) buffer_.append(std::string_view("  "));
    fmt::format_to(std::back_inserter(buffer_), format, std::forward<Args>(args)...);
    buffer_.push_back('\n');
  }
  void blank() { buffer_.push_back('\n'); }
  /// Appends `source` (whole lines, already indented) as it is.
  void text(std::string_view source) { buffer_.append(source); }
  void indent() { ++depth_; }
  void dedent() { --depth_; }
  std::string str() const { return fmt::to_string(buffer_); }

 private:
  fmt::memory_buffer buffer_;
  int depth_ = 0;
};

}  // namespace attnjit
