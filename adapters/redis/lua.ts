// Lua pieces every Redis fence script shares. Tokens stay decimal strings on
// the server: Lua numbers are doubles, exact only to 2^53, and two tokens
// above that could compare equal; canonical decimals (no sign, no leading
// zero) compare by length, then as strings.

/** `is_token(s)`: s is a canonical decimal token in 1..2^63-1. */
export const IS_TOKEN = `
local function is_token(s)
  if type(s) ~= 'string' or #s > 19 or not string.find(s, '^[1-9][0-9]*$') then return false end
  return #s < 19 or s <= '9223372036854775807'
end`;

/** `below(a, b)`: token a < token b (both canonical). */
export const BELOW = `
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end`;
