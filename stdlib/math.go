package stdlib

import (
	starmath "go.starlark.net/lib/math"
)

// Math is the Starlark module math, go.starlark.net/lib/math with its
// built-ins named "math.NAME" in errors. Every function accepts ints and
// floats:
//
//	math.ceil(x) math.floor(x) math.round(x) math.fabs(x) math.copysign(x, y)
//	math.mod(x, y) math.remainder(x, y) math.pow(x, y) math.exp(x) math.sqrt(x)
//	math.log(x, base=e) math.gamma(x) math.hypot(x, y)
//	math.sin(x) math.cos(x) math.tan(x) math.asin(x) math.acos(x) math.atan(x) math.atan2(y, x)
//	math.sinh(x) math.cosh(x) math.tanh(x) math.asinh(x) math.acosh(x) math.atanh(x)
//	math.degrees(x) math.radians(x)
//	math.e math.pi
var Math = qualify(starmath.Module)

var mathModule = Module{
	Name:  "math",
	Doc:   "Floating-point functions and constants (go.starlark.net/lib/math). Every function accepts ints and floats; ceil and floor return ints, the others floats.",
	Value: Math,
	Funcs: []Func{
		{"ceil", "math.ceil(x) -> int", "Returns the smallest integer greater than or equal to x."},
		{"floor", "math.floor(x) -> int", "Returns the largest integer less than or equal to x."},
		{"round", "math.round(x) -> float", "Returns x rounded to the nearest integer, halves away from zero."},
		{"fabs", "math.fabs(x) -> float", "Returns the absolute value of x as a float."},
		{"copysign", "math.copysign(x, y) -> float", "Returns a value with the magnitude of x and the sign of y."},
		{"mod", "math.mod(x, y) -> float", "Returns the floating-point remainder of x/y, with the sign of x."},
		{"remainder", "math.remainder(x, y) -> float", "Returns the IEEE 754 remainder of x/y."},
		{"pow", "math.pow(x, y) -> float", "Returns x raised to the power y."},
		{"exp", "math.exp(x) -> float", "Returns e raised to the power x."},
		{"sqrt", "math.sqrt(x) -> float", "Returns the square root of x."},
		{"log", "math.log(x, base=math.e) -> float", "Returns the logarithm of x in the given base, the natural logarithm by default."},
		{"gamma", "math.gamma(x) -> float", "Returns the Gamma function of x."},
		{"hypot", "math.hypot(x, y) -> float", "Returns sqrt(x*x + y*y), the length of the vector (x, y)."},
		{"sin", "math.sin(x) -> float", "Returns the sine of x radians."},
		{"cos", "math.cos(x) -> float", "Returns the cosine of x radians."},
		{"tan", "math.tan(x) -> float", "Returns the tangent of x radians."},
		{"asin", "math.asin(x) -> float", "Returns the arc sine of x, in radians."},
		{"acos", "math.acos(x) -> float", "Returns the arc cosine of x, in radians."},
		{"atan", "math.atan(x) -> float", "Returns the arc tangent of x, in radians."},
		{"atan2", "math.atan2(y, x) -> float", "Returns the arc tangent of y/x in radians, using the signs of both to pick the quadrant."},
		{"sinh", "math.sinh(x) -> float", "Returns the hyperbolic sine of x."},
		{"cosh", "math.cosh(x) -> float", "Returns the hyperbolic cosine of x."},
		{"tanh", "math.tanh(x) -> float", "Returns the hyperbolic tangent of x."},
		{"asinh", "math.asinh(x) -> float", "Returns the inverse hyperbolic sine of x."},
		{"acosh", "math.acosh(x) -> float", "Returns the inverse hyperbolic cosine of x."},
		{"atanh", "math.atanh(x) -> float", "Returns the inverse hyperbolic tangent of x."},
		{"degrees", "math.degrees(x) -> float", "Converts the angle x from radians to degrees."},
		{"radians", "math.radians(x) -> float", "Converts the angle x from degrees to radians."},
		{"e", "math.e", "The base of natural logarithms, about 2.71828."},
		{"pi", "math.pi", "The ratio of a circle's circumference to its diameter, about 3.14159."},
	},
}
