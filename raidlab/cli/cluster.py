"""`raidlab cluster up|serve|status|key|cut|heal|down|clients|peaks`: parsing and printing only.

The actions live in raidlab.cluster.control; the cluster itself is the cluster daemon
(raidlab.cluster.daemon). Status lines go to stderr, the result (the nodes and their NBD
exports, or with --json one JSON object) to stdout.
"""

from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def _status_updates(name: str, spinner):
    if _err.is_terminal:
        return lambda m: spinner.update(f"{name}: {m}")
    return lambda m: _err.print(f"{time.strftime('%H:%M:%S')} {name}: {m}")


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def _exports(node: dict) -> str:
    return "\n".join(f"{d['uri']} ({d['model']}, {_mib(d['size'])})" for d in node["disks"])


def _print_up(ready: dict) -> None:
    link, kind = ready["link"], ready.get("kind", "netns")
    if kind == "list":
        title = (f"cluster {ready['name']}: {len(ready['nodes'])} hosts of a node list "
                 "(nothing runs for it on this host)")
    elif kind == "serve":
        title = f"{ready['name']}: this host serves its disks as one node of a cluster, daemon pid {ready['pid']}"
    else:
        title = (f"cluster {ready['name']}: {len(ready['nodes'])} nodes on bridge {ready['bridge']}, "
                 f"links {link['rate']} each way (tbf burst {link['burst_bytes']} B, queue "
                 f"{link['limit_bytes']} B), daemon pid {ready['pid']}")
    table = Table(title=title)
    columns = {"netns": ("node", "namespace", "address", "NBD exports", "nbdkit pid"),
               "serve": ("node", "address", "NBD exports", "nbdkit pid"),
               "list": ("node", "address", "NBD exports", "answers")}[kind]
    for col in columns:
        table.add_column(col, no_wrap=True)
    for node in ready["nodes"]:
        cells = {"node": str(node["index"]), "namespace": node["namespace"], "address": node["cidr"],
                 "NBD exports": _exports(node), "nbdkit pid": str(node["nbdkit_pid"])}
        if kind != "netns":
            cells["address"] = f"{node['address']} port {node['nbd_port']}"
        if "reachable" in node:
            cells["answers"] = "yes" if node["reachable"] else f"[red]no[/]: {node['answer']}"
        else:
            cells["answers"] = "yes (when it came up)"
        table.add_row(*(cells[col] for col in columns))
    _out.print(table)
    if ready.get("tls_psk_file"):
        _out.print(f"NBD over TLS: clients need the key in {ready['tls_psk_file']} "
                   f"(user {ready['tls_username']}; `raidlab cluster key {ready['name']}`)")


def _counter(qdisc: dict | None) -> str:
    if not qdisc:
        return "-"
    return (f"{qdisc['bytes'] / 2**20:.1f} MiB, {qdisc['packets']} pkt, {qdisc['drops']} dropped, "
            f"{qdisc['overlimits']} waited")


def _print_status(status: dict) -> None:
    _print_up(status)
    if status.get("kind") == "list":
        return  # the hosts' own `raidlab cluster status` shows their disks
    table = Table(title="links (tbf counters: sent = the node's eth0, received = its switch port) and disks")
    for col in ("node", "cable", "sent", "received", "disk I/O"):
        table.add_column(col)
    for node in status["nodes"]:
        disks = "\n".join(f"{d['name']}: {d['statistics']['reads']} reads, {d['statistics']['writes']} writes, "
                          f"busy {d['statistics']['busy_time']:.2f} s" for d in node["disks"])
        cable = "[red]cut[/]" if node.get("cable") == "cut" else node.get("cable", "a real one")
        table.add_row(str(node["index"]), cable, _counter(node["links"]["sent"]),
                      _counter(node["links"]["received"]), disks)
    _out.print(table)


@click.group("cluster")
def cluster_group():
    """A cluster of nodes on this host: network namespaces on a bridge, links shaped with tc
    tbf, each node serving its emulated disks over NBD (nbdkit); or of real hosts, each
    serving its disks (`serve`) and listed in a node list (`up --node-list`). See
    docs/cluster.md."""


@cluster_group.command("up")
@click.argument("name")
@click.option("--nodes", "nodes", type=int, default=None, help="number of nodes (the paper's cluster: 16)")
@click.option("--node-list", "node_list", type=click.Path(dir_okay=False), default=None,
              help="instead of --nodes: a TOML file naming hosts that serve their disks (`raidlab cluster "
                   "serve`), one [[node]] each (docs/cluster.md, \"Several real machines\")")
@click.option("--psk-file", "psk_file", type=click.Path(dir_okay=False), default=None,
              help="with --node-list: the TLS key the hosts serve with (a copy of the file `raidlab cluster "
                   "key` names on the host that made it)")
@click.option("--disks-per-node", type=int, default=1, show_default=True, help="emulated disks each node serves")
@click.option("--disk-model", default="none", show_default=True,
              help="catalog model (raidlab disk models) of every disk, or one per disk of a node: m0,m1,...")
@click.option("--disk-size", default="256M", show_default=True, help="size of each disk, e.g. 256M, 1G")
@click.option("--link", default="100mbit", show_default=True,
              help="each node's link rate, each way, as tc writes it (100mbit: the paper's Fast Ethernet)")
@click.option("--subnet", default="10.77.0.0/24", show_default=True,
              help="IPv4 subnet of the nodes; node k is host k+1")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def up_cmd(name, nodes, node_list, psk_file, disks_per_node, disk_model, disk_size, link, subnet, home, as_json):
    """Bring cluster NAME up and print its nodes, their addresses and NBD exports: N nodes as
    network namespaces on this host (--nodes), or the hosts of a node list (--node-list).
    Exports are served over TLS to holders of the cluster's key only."""
    from pathlib import Path

    from raidlab.cluster import control
    from raidlab.cluster.plan import ClusterSpec
    from raidlab.errors import UsageError
    from raidlab.units import parse_link_rate, parse_size

    if (nodes is None) == (node_list is None):
        raise UsageError("give --nodes N or --node-list FILE (one of them)",
                         hint="--nodes builds N nodes on this host; --node-list names hosts that serve their disks")
    if node_list is None and psk_file is not None:
        raise UsageError("--psk-file goes with --node-list: a cluster of namespaces makes its own key",
                         hint="leave --psk-file out")
    if node_list is not None:
        if psk_file is None:
            raise UsageError("--node-list needs --psk-file FILE: the hosts serve only to holders of their TLS key",
                             hint="copy the file `raidlab cluster key NAME` names on the host that made it")
        context = click.get_current_context()
        for param in ("disks_per_node", "disk_model", "disk_size", "link", "subnet"):
            if context.get_parameter_source(param) not in (click.core.ParameterSource.DEFAULT, None):
                flag = "--" + param.replace("_", "-")
                raise UsageError(f"{flag} does not go with --node-list: the hosts serve what they serve",
                                 hint=f"set it on each host's `raidlab cluster serve`")
        with _err.status(f"asking the hosts of {node_list}"):
            ready = control.up_listed(name, Path(node_list), psk_file=Path(psk_file), home=home)
        click.echo(json.dumps(ready)) if as_json else _print_up(ready)
        return
    spec = ClusterSpec(name, nodes, disks_per_node, disk_model, parse_size(disk_size, "--disk-size"),
                       parse_link_rate(link, "--link"), subnet)
    with _err.status(f"bringing {name} up") as spinner:
        ready = control.up(spec, home=home, on_status=_status_updates(name, spinner))
    if as_json:
        click.echo(json.dumps(ready))
    else:
        _print_up(ready)


@cluster_group.command("serve")
@click.argument("name")
@click.option("--address", required=True, help="this host's address the NBD server listens on")
@click.option("--port", type=click.IntRange(1, 65535), default=10809, show_default=True, help="its TCP port")
@click.option("--disks-per-node", type=int, default=1, show_default=True, help="emulated disks this host serves")
@click.option("--disk-model", default="none", show_default=True,
              help="catalog model (raidlab disk models) of every disk, or one per disk: m0,m1,...")
@click.option("--disk-size", default="256M", show_default=True, help="size of each disk, e.g. 256M, 1G")
@click.option("--psk-file", "psk_file", type=click.Path(dir_okay=False), default=None,
              help="serve with this TLS key (a copy of the file `raidlab cluster key` names on the first host) "
                   "instead of a new one")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def serve_cmd(name, address, port, disks_per_node, disk_model, disk_size, psk_file, home, as_json):
    """Serve this host's emulated disks as one node of a cluster of real hosts (nbdkit on
    ADDRESS, over TLS to holders of the key only): the other end of a node list (`cluster up
    --node-list`). The first host makes a new key; give the others a copy (--psk-file).
    `cluster down NAME` stops it."""
    from pathlib import Path

    from raidlab.cluster import control
    from raidlab.cluster.plan import SERVE, ClusterSpec
    from raidlab.units import parse_size

    spec = ClusterSpec(name, 1, disks_per_node, disk_model, parse_size(disk_size, "--disk-size"),
                       kind=SERVE, address=address, port=port)
    with _err.status(f"serving {name}") as spinner:
        ready = control.up(spec, home=home, on_status=_status_updates(name, spinner),
                           psk_file=Path(psk_file) if psk_file is not None else None)
    click.echo(json.dumps(ready)) if as_json else _print_up(ready)


@cluster_group.command("status")
@click.argument("name")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def status_cmd(name, home, as_json):
    """Nodes, addresses, NBD exports, link counters and disk statistics of cluster NAME."""
    from raidlab.cluster import control

    status = control.status(name, home=home)
    if as_json:
        click.echo(json.dumps(status))
    else:
        _print_status(status)


@cluster_group.command("key")
@click.argument("name")
@click.option("--home", envvar="RAIDLAB_HOME")
def key_cmd(name, home):
    """Print the path of cluster NAME's TLS key file (0600): what its NBD servers require.
    Copy it, privately, to the other hosts of a cluster of real machines (`cluster serve
    --psk-file`) and to the host that lists them (`cluster up --node-list --psk-file`)."""
    from raidlab.cluster import control

    click.echo(control.key(name, home=home).path)


@cluster_group.command("cut")
@click.argument("name")
@click.option("--node", "node", type=int, required=True, help="the node whose cable is cut")
@click.option("--home", envvar="RAIDLAB_HOME")
def cut_cmd(name, node, home):
    """Cut node NODE's cable at the switch: the node and its disks drop off the cluster, as a
    failed node would (its switch port goes down; `heal` plugs it back in)."""
    from raidlab.cluster import control

    port = control.cut(name, node, home=home)
    _err.print(f"{name}: node {node}'s cable is cut (switch port {port} down)")


@cluster_group.command("heal")
@click.argument("name")
@click.option("--node", "node", type=int, required=True, help="the node whose cable is plugged back in")
@click.option("--home", envvar="RAIDLAB_HOME")
def heal_cmd(name, node, home):
    """Plug node NODE's cable back in (its switch port comes up again)."""
    from raidlab.cluster import control

    port = control.heal(name, node, home=home)
    _err.print(f"{name}: node {node}'s cable is back (switch port {port} up)")


@cluster_group.command("down")
@click.argument("name")
@click.option("--home", envvar="RAIDLAB_HOME")
def down_cmd(name, home):
    """Stop cluster NAME: its servers, disks, namespaces, links and bridge are released."""
    from raidlab.cluster import control

    with _err.status(f"bringing {name} down"):
        listed = control.is_listed(name, home=home)
        stopped, released = control.down(name, home=home)
    for line in released:
        _err.print(f"released leftover of a killed run: {line}")
    if listed:
        _err.print(f"{name}: the node list is forgotten; its hosts serve on until each stops its `cluster serve`")
    else:
        _err.print(f"{name}: {'down' if stopped else 'was not up'}; nothing of it is left on this host")


@cluster_group.command("clients")
@click.argument("name")
@click.argument("array")
@click.option("--clients", type=click.IntRange(1, 64), required=True, help="clients, one per node, all at once")
@click.option("--op", type=click.Choice(["write", "read"]), required=True, help="each client writes or reads its file")
@click.option("--file", "file_size", default="20M", show_default=True, help="each client's file (the paper: 20 MB)")
@click.option("--block", default="32K", show_default=True, help="bytes per request (the paper: 32 KB)")
@click.option("--depth", type=click.IntRange(1, 256), default=4, show_default=True, help="requests in flight per client")
@click.option("--base", default="0", show_default=True, help="where client 0's file starts in the volume")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def clients_cmd(name, array, clients, op, file_size, block, depth, base, home, as_json):
    """Run parallel clients of ARRAY over cluster NAME, one per node, each on its own
    instance of the array (joined for the run, docs/cluster.md), each reading or writing its
    own file at once with fio; print the aggregate bandwidth (RAID-x §7, Fig. 8, live)."""
    from raidlab.cluster.clients import run_clients
    from raidlab.units import parse_size

    with _err.status(f"{clients} client(s) of {array}") as spinner:
        report = run_clients(name, array, clients=clients, op=op, file_bytes=parse_size(file_size, "--file"),
                             block=parse_size(block, "--block"), depth=depth,
                             base=0 if base in ("0", "") else parse_size(base, "--base"),
                             home=home, status=_status_updates(array, spinner))
    if as_json:
        click.echo(json.dumps(report))
        return
    _out.print(f"{report['arch']} {array} over {name}: {clients} client(s) on node(s) "
               f"{', '.join(map(str, report['nodes']))}, {op} {file_size} each in {block} requests, "
               f"{depth} in flight: {report['aggregate_mb_s']:.2f} MB/s aggregate in {report['seconds']:.2f} s "
               f"(each: {', '.join(f'{x:.2f}' for x in report['client_mb_s'])} MB/s)")


@cluster_group.command("peaks")
@click.option("--disks", type=click.IntRange(3, 1024), default=16, show_default=True, help="n, disks (one per node)")
@click.option("--disk-model", default="maxtor-91020d6", show_default=True, help="catalog hdd model of every disk")
@click.option("--chunk", default="32K", show_default=True, help="the block (stripe unit)")
@click.option("--blocks", type=click.IntRange(1), default=640, show_default=True,
              help="m, blocks of the file (640 x 32 KB: the paper's 20 MB)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def peaks_cmd(disks, disk_model, chunk, blocks, as_json):
    """RAID-x Table 3 (theoretical peaks of RAID-10, RAID-5, chained declustering, RAID-x)
    evaluated on a disk model: B, R and W measured on the model in virtual time."""
    from raidlab import archs
    from raidlab.cluster.peaks import ARCHS, peaks
    from raidlab.units import parse_size

    result = peaks(disk_model, disks, parse_size(chunk, "--chunk"), blocks)
    if as_json:
        click.echo(json.dumps(result))
        return
    _out.print(f"{disk_model}, block {chunk}: B = {result['B'] / 1e6:.2f} MB/s (outer zone, sequential), "
               f"R = {result['R'] * 1e3:.2f} ms, W = {result['W'] * 1e3:.2f} ms (random, write cache off); "
               f"n = {disks}, m = {blocks}")
    table = Table(title="RAID-x Table 3 with numbers (bandwidths MB/s, times ms)")
    table.add_column("", no_wrap=True)
    for arch in ARCHS:
        table.add_column(archs.get(arch).peaks.title, justify="right")
    rows = [("max bandwidth, read", "read", 1e-6), ("max bandwidth, large write", "large_write", 1e-6),
            ("max bandwidth, small write", "small_write", 1e-6), ("time, large read", "large_read_time", 1e3),
            ("time, small read", "small_read_time", 1e3), ("time, large write", "large_write_time", 1e3),
            ("time, small write", "small_write_time", 1e3)]
    for label, key, scale in rows:
        table.add_row(label, *(f"{result['table'][a][key] * scale:.1f}" for a in ARCHS))
    table.add_row("fault coverage", *(result["table"][a]["fault_coverage"] for a in ARCHS))
    _out.print(table)


def register(cli: click.Group) -> None:
    cli.add_command(cluster_group)
