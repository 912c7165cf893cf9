/** Dtypes of spec Table 10-1: names and itemsizes (R-DT-1, R-DT-2). */

export const ITEMSIZE: ReadonlyMap<string, number> = new Map([
  ["bool", 1], ["int8", 1], ["int16", 2], ["int32", 4], ["int64", 8],
  ["uint8", 1], ["uint16", 2], ["uint32", 4], ["uint64", 8],
  ["float16", 2], ["bfloat16", 2], ["float32", 4], ["float64", 8],
  ["complex64", 8], ["complex128", 16],
  ["float8_e4m3fn", 1], ["float8_e5m2", 1], ["float8_e4m3fnuz", 1], ["float8_e5m2fnuz", 1], ["float8_e8m0fnu", 1],
]);

export const isDtype = (name: string): boolean => ITEMSIZE.has(name);
