"""Sum BSD process accounting records (acct v3, 64 bytes each) by program name: CPU seconds
(user + system, user, system), process count. Usage: acctsum.py FILE [ROWS]."""
import struct, sys, collections
def comp(v): return (v & 0x1fff) << (3 * (v >> 13))
recs = []
data = open(sys.argv[1], "rb").read()
for off in range(0, len(data) - 63, 64):
    f = struct.unpack_from("<BBHIIIIIIf8H16s", data, off)
    flag, ver, tty, exitc, uid, gid, pid, ppid, btime, etime = f[:10]
    ut, st = comp(f[10]) / 100, comp(f[11]) / 100
    comm = f[18].split(b"\0")[0].decode(errors="replace")
    recs.append((pid, ppid, comm, ut, st, etime / 100, btime))
by = collections.defaultdict(lambda: [0, 0.0, 0.0])
for pid, ppid, comm, ut, st, et, bt in recs:
    b = by[comm]; b[0] += 1; b[1] += ut; b[2] += st
tot = sum(b[1] + b[2] for b in by.values())
print(f"records {len(recs)}, cpu total {tot:.0f} s")
for comm, (n, u, s) in sorted(by.items(), key=lambda x: -(x[1][1] + x[1][2]))[:int(sys.argv[2]) if len(sys.argv) > 2 else 30]:
    print(f"{u+s:8.1f} {u:8.1f} {s:8.1f} {n:6d} {comm}")
