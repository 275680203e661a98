"""Per-member I/O of the 'members' case (1,024 random 4 KiB writes): engine raid5's emulated
drives against md raid5's emulated drives and md's own /sys/block counters in the guest."""
import json, sys, pathlib
d = pathlib.Path(sys.argv[1]) / "runs"
def delta(doc, key):
    a, b = doc["array_status"], doc["array_status_before"]
    if key == "drives":
        ma, mb = a["statistics"]["members"], b["statistics"]["members"]
        return [(x["name"], x["reads"] - y["reads"], x["bytes_read"] - y["bytes_read"],
                 x["writes"] - y["writes"], x["bytes_written"] - y["bytes_written"]) for x, y in zip(ma, mb)]
    ga, gb = a.get("block_stat") or {}, b.get("block_stat") or {}
    return [(n, ga[n]["reads"] - gb[n]["reads"], ga[n]["read_bytes"] - gb[n]["read_bytes"],
             ga[n]["writes"] - gb[n]["writes"], ga[n]["write_bytes"] - gb[n]["write_bytes"]) for n in sorted(ga)]
print("| run | source | member | reads | read KiB | writes | written KiB |")
print("|---|---|---|---|---|---|---|")
for f in sorted(d.glob("*--members--r*.json")):
    doc = json.load(open(f))
    if doc.get("status") != "ok":
        continue
    sources = [("emulated drives", "drives")] + ([("guest /sys/block", "guest")] if doc["arch"].startswith("md") else [])
    for label, key in sources:
        for name, r, rb, w, wb in delta(doc, key):
            print(f"| {f.stem} | {label} | {name} | {r} | {rb // 1024} | {w} | {wb // 1024} |")
