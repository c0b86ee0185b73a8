#include "bench/common/json.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

namespace mok::bench {
namespace {

// Large enough for any int64 and for the shortest round-trip spelling of any double.
constexpr size_t kNumberBufferSize = 32;

void write_integer(std::string& out, int64_t value) {
    char buffer[kNumberBufferSize];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out.append(buffer, result.ptr);
}

void write_number(std::string& out, double value) {
    if (!std::isfinite(value)) {
        out += "null";
        return;
    }
    // Shortest text that reads back as the same double: result files stay exact and small.
    char buffer[kNumberBufferSize];
    const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
    out.append(buffer, result.ptr);
}

void write_newline(std::string& out, int indent, int depth) {
    if (indent > 0) {
        out += '\n';
        out.append(static_cast<size_t>(indent * depth), ' ');
    }
}

}  // namespace

Json Json::array() {
    Json value;
    value.kind_ = Kind::kArray;
    return value;
}

Json Json::object() {
    Json value;
    value.kind_ = Kind::kObject;
    return value;
}

Json& Json::set(const std::string& key, Json value) {
    if (kind_ == Kind::kNull) {
        kind_ = Kind::kObject;
    }
    for (auto& member : members_) {
        if (member.first == key) {
            member.second = std::move(value);
            return *this;
        }
    }
    members_.emplace_back(key, std::move(value));
    return *this;
}

Json& Json::push(Json value) {
    if (kind_ == Kind::kNull) {
        kind_ = Kind::kArray;
    }
    items_.push_back(std::move(value));
    return *this;
}

const Json* Json::find(const std::string& key) const {
    for (const auto& member : members_) {
        if (member.first == key) {
            return &member.second;
        }
    }
    return nullptr;
}

size_t Json::size() const {
    if (kind_ == Kind::kArray) {
        return items_.size();
    }
    return kind_ == Kind::kObject ? members_.size() : 0;
}

std::string Json::dump(int indent) const {
    std::string out;
    write(out, indent, 0);
    if (indent > 0) {
        out += '\n';
    }
    return out;
}

void Json::write(std::string& out, int indent, int depth) const {
    switch (kind_) {
        case Kind::kNull:
            out += "null";
            return;
        case Kind::kBool:
            out += bool_ ? "true" : "false";
            return;
        case Kind::kInteger:
            write_integer(out, integer_);
            return;
        case Kind::kNumber:
            write_number(out, number_);
            return;
        case Kind::kString:
            out += json_quote(string_);
            return;
        case Kind::kArray:
            out += '[';
            for (size_t i = 0; i < items_.size(); ++i) {
                out += i == 0 ? "" : ",";
                write_newline(out, indent, depth + 1);
                items_[i].write(out, indent, depth + 1);
            }
            if (!items_.empty()) {
                write_newline(out, indent, depth);
            }
            out += ']';
            return;
        case Kind::kObject:
            out += '{';
            for (size_t i = 0; i < members_.size(); ++i) {
                out += i == 0 ? "" : ",";
                write_newline(out, indent, depth + 1);
                out += json_quote(members_[i].first);
                out += indent > 0 ? ": " : ":";
                members_[i].second.write(out, indent, depth + 1);
            }
            if (!members_.empty()) {
                write_newline(out, indent, depth);
            }
            out += '}';
            return;
    }
}

std::string json_quote(const std::string& text) {
    // Characters below 0x20 must be escaped (RFC 8259, section 7); the named escapes read better where they exist.
    constexpr unsigned char kFirstPrintable = 0x20;
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (static_cast<unsigned char>(c) < kFirstPrintable) {
                    char escape[sizeof("\\u0000")];
                    std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(c));
                    out += escape;
                } else {
                    out += c;
                }
        }
    }
    out += '"';
    return out;
}

}  // namespace mok::bench
