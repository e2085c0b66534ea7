// Package pycompat does what Python does, where looprun must read and write
// exactly as little-loops (a Python program) does: str() and repr() of
// decoded values (Str, Repr, FormatFloat), json.dumps' spacing and escapes
// (JSONDumps), a dict's order of keys (Dict, DecodeJSON), float() and str.strip() (ParseFloat, Strip, IsSpace), and the
// syntax of Python's re written for the backtracking engine looprun matches
// with (TranslateRegex).
//
// It is a leaf: it imports only the standard library, so any package may use
// it. What is bound to one reader stays with it: PyYAML's resolvers (which
// plain scalar is an int, a float, a boolean) and its YAML decoder stay in
// internal/loopfile, which formats what they read with FormatFloat and Str;
// evaluate.CompilePattern compiles what TranslateRegex writes.
package pycompat
