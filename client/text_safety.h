// Text from the server made safe for a terminal, and the user's typed
// references normalised (client/text_safety.cc).
#ifndef FCA_CLIENT_TEXT_SAFETY_H_
#define FCA_CLIENT_TEXT_SAFETY_H_

#include <string>
#include <string_view>

namespace fca::client {

// True when `text` is well-formed UTF-8: no stray continuation bytes,
// truncated sequences, overlong forms, surrogates or code points above
// U+10FFFF. Protobuf refuses anything else in a proto3 `string` field.
bool IsValidUtf8(std::string_view text);

// `text` made safe to print on a terminal. Control characters (C0
// including newline and tab, DEL, C1), the Unicode bidirectional controls
// and line separators become visible escapes ("\x1b", "\n", "\u202e"), and so
// does every byte that is not part of well-formed UTF-8 ("\xff"); all other
// text is unchanged. Every string that comes from the server goes through
// this in human-readable output (tables, plain text, progress lines,
// error messages), so a job label cannot move the cursor, recolour or clear
// the screen, or fake a line. JSON and CSV output stay faithful instead,
// escaped by their own rules.
std::string SanitizeForTerminal(std::string_view text);
// SanitizeForTerminal of each line of `text`, keeping its '\n's: for
// multi-line output built by us (pretty JSON) around server strings.
std::string SanitizeLinesForTerminal(std::string_view text);

// A hex SHA-256 typed by a user, in lower case (the form the server stores
// and compares); anything that is not 64 hex digits is returned unchanged
// for the server to judge.
std::string NormalizeSha256Hex(std::string_view text);
// A dataset reference of an AuditSpec: "sha256:<64 hex digits>" (prefix in
// any case) becomes "sha256:<lower-case hex>"; a name is returned unchanged.
std::string NormalizeDatasetRef(std::string_view ref);

}  // namespace fca::client

#endif  // FCA_CLIENT_TEXT_SAFETY_H_
