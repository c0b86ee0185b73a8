// A small JSON value for benchmark results: null, booleans, integers, numbers, strings, arrays and objects
// whose members keep their insertion order (so a result file reads in the order it was written).
//
// It writes JSON and never reads it; the readers are bench/report.py and people. Non-finite numbers have no
// JSON spelling and are written as null.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mok::bench {

class Json {
  public:
    enum class Kind { kNull, kBool, kInteger, kNumber, kString, kArray, kObject };

    Json() = default;
    Json(bool value) : kind_(Kind::kBool), bool_(value) {}
    template <std::integral T>
    requires(!std::same_as<T, bool>) Json(T value) : kind_(Kind::kInteger), integer_(static_cast<int64_t>(value)) {}
    template <std::floating_point T>
    Json(T value) : kind_(Kind::kNumber), number_(static_cast<double>(value)) {}
    Json(const char* value) : kind_(Kind::kString), string_(value) {}
    Json(std::string value) : kind_(Kind::kString), string_(std::move(value)) {}

    static Json array();
    static Json object();

    Kind kind() const { return kind_; }

    // Object member `key` set to `value`; an existing member of that name is replaced in place.
    // Returns *this so calls chain. Calling it on a null value makes the value an object first.
    Json& set(const std::string& key, Json value);
    // Appends to an array; calling it on a null value makes the value an array first.
    Json& push(Json value);

    // The member named `key`, or nullptr (also when this is not an object).
    const Json* find(const std::string& key) const;
    size_t size() const;  // members or items; 0 for scalars

    // The JSON text; indent > 0 puts one member or item per line, indent == 0 writes one line.
    std::string dump(int indent = 2) const;

  private:
    void write(std::string& out, int indent, int depth) const;

    Kind kind_ = Kind::kNull;
    bool bool_ = false;
    int64_t integer_ = 0;
    double number_ = 0.0;
    std::string string_;
    std::vector<Json> items_;
    std::vector<std::pair<std::string, Json>> members_;
};

// `text` as a JSON string literal, quotes included: ", \ and control characters escaped; other bytes (UTF-8)
// pass through unchanged.
std::string json_quote(const std::string& text);

}  // namespace mok::bench
