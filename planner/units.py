"""SI constants used across the planner. Nothing else lives here."""

KILO = 1e3
MEGA = 1e6
GIGA = 1e9
TERA = 1e12

BYTES_PER_KIB = 1024
BYTES_PER_MIB = 1024**2
BYTES_PER_GIB = 1024**3
BYTES_PER_GB = 1e9
BYTES_PER_TB = 1e12

BITS_PER_BYTE = 8
SECONDS_PER_MS = 1e-3
SECONDS_PER_US = 1e-6
SECONDS_PER_HOUR = 3600.0

#: bytes per element of each weight / KV dtype the API accepts
DTYPE_BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}
