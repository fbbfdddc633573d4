"""Ed25519 signature verification (RFC 8032, section 5.1.7) in pure Python.

A host that pulls its image must check the image's signature with nothing
but a Python 3.9+ and its standard library: the `cryptography` package may
not be installed there.  The puller uses `cryptography` when it can import
it and this module otherwise.  Only *verification* is here: it handles no
secret, so the timing of Python's integer arithmetic leaks nothing worth
having.  Signing stays with `cryptography` on the controller.

This file is copied as it is onto hosts next to the puller; it must import
nothing but the standard library.
"""

import hashlib

__all__ = ["verify", "InvalidKey"]

_P = 2 ** 255 - 19
_L = 2 ** 252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


class InvalidKey(ValueError):
    """A public key that is not 32 bytes encoding a point of the curve."""


def _add(p, q):
    # Extended homogeneous coordinates (X, Y, Z, T), x = X/Z, y = Y/Z,
    # xy = T/Z; the formula of RFC 8032 5.1.4, complete on this curve, so it
    # also doubles.
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(k, p):
    q = (0, 1, 1, 0)
    while k:
        if k & 1:
            q = _add(q, p)
        p = _add(p, p)
        k >>= 1
    return q


def _equal(p, q):
    return ((p[0] * q[2] - q[0] * p[2]) % _P == 0
            and (p[1] * q[2] - q[1] * p[2]) % _P == 0)


def _x_of(y, sign):
    # RFC 8032 5.1.3: recover x from y and the sign bit; None when there is
    # no such point, or when the encoding is not canonical.
    if y >= _P:
        return None
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P:
        return None
    if x & 1 != sign:
        x = _P - x
    return x


def _decode(b):
    if len(b) != 32:
        return None
    n = int.from_bytes(b, "little")
    y, sign = n & ((1 << 255) - 1), n >> 255
    x = _x_of(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_B = _decode((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def verify(public_key, signature, message):
    """Whether SIGNATURE (64 bytes) is a valid Ed25519 signature of MESSAGE
    (bytes) by PUBLIC_KEY (32 bytes).  Raise InvalidKey when PUBLIC_KEY is
    not a key at all: that is a mistake in the configuration, not a bad
    signature."""
    a = _decode(bytes(public_key))
    if a is None:
        raise InvalidKey("not an Ed25519 public key (32 bytes encoding a curve point)")
    signature = bytes(signature)
    if len(signature) != 64:
        return False
    r = _decode(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if r is None or s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + bytes(public_key) + message).digest(),
                       "little") % _L
    return _equal(_mul(s, _B), _add(r, _mul(h, a)))
