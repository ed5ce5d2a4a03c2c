// Lua pieces every Redis fence script shares, as expressions spelled into
// the script's text, not Lua functions: a script's functions are made again
// on every call, which costs more than the compare itself.
//
// Tokens stay decimal strings on the server: Lua numbers are doubles, exact
// only to 2^53, and two tokens above that could compare equal; canonical
// decimals (no sign, no leading zero) compare by length, then as strings.

/** Lua: `s` (a string variable) is a canonical decimal token in 1..2^63-1. */
export const isToken = (s: string): string =>
  `(#${s} <= 19 and string.find(${s}, '^[1-9][0-9]*$') ~= nil and (#${s} < 19 or ${s} <= '9223372036854775807'))`;

/** Lua: token `a` < token `b` (both canonical string variables). */
export const below = (a: string, b: string): string => `(#${a} < #${b} or (#${a} == #${b} and ${a} < ${b}))`;
