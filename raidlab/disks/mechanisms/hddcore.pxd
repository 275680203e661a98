# Cython's types for hddcore.py (an augmenting declaration file): the same source compiled,
# its attributes as C fields, its arithmetic on C integers and doubles. Division and modulo
# keep Python's semantics (Cython's default, cdivision off), so the compiled module computes
# what the Python one does.
cimport cython


cdef double ROTATION_EPSILON, MS

cdef class HddCore:
    cdef public list zone_starts, zone_first_cylinders, zone_track_bytes
    cdef public list zone_physical_first, zone_physical_step, zone_head_skew, zone_cylinder_skew
    cdef public Py_ssize_t last_zone
    cdef public long long heads, cylinder, head
    cdef public double rev, head_switch_s, cylinder_switch_s
    cdef public double short_a, short_b, boundary, long_a, long_b
    cdef public bint span_start
    cdef public double seek, switches, rotation, transfer

    @cython.locals(i=Py_ssize_t)
    cdef Py_ssize_t _zone(self, list starts, long long value)

    cpdef Py_ssize_t zone_of_byte(self, long long offset)

    cpdef Py_ssize_t zone_of_cylinder(self, long long cylinder)

    @cython.locals(z=Py_ssize_t)
    cpdef long long cylinder_of(self, long long offset)

    @cython.locals(z=Py_ssize_t, k=cython.longlong)
    cpdef double position(self, long long cylinder)

    @cython.locals(d=cython.double)
    cpdef double seek_s(self, long long from_cylinder, long long to_cylinder)

    @cython.locals(rev=cython.double, heads=cython.longlong, end=cython.longlong, first=bint,
                   z=Py_ssize_t, track_bytes=cython.longlong, rel=cython.longlong,
                   per_cylinder=cython.longlong, k=cython.longlong, rest=cython.longlong,
                   h=cython.longlong, in_track=cython.longlong, c=cython.longlong,
                   n=cython.longlong, s=cython.double, start_angle=cython.double,
                   byte_angle=cython.double, frac=cython.double, w=cython.double,
                   x=cython.double)
    cpdef double media(self, double t, long long offset, long long length, long long cylinder,
                       long long head, double seek, double switches, double rotation,
                       double transfer)
