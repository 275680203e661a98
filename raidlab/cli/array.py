"""Engine arrays: create, list, status, destroy, assemble, fail, replace, check.

Parsing and printing only; the work is done by the array daemon (raidlab.service.daemon)
through raidlab.service.control.
"""

from __future__ import annotations

import json
import os

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from raidlab.cli.archs import ListsArchitectures
from raidlab.errors import NeedsRootError, UnknownModelError, UsageError
from raidlab.signals import deferred_signals
from raidlab.units import parse_key_values, parse_size

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


def _lab(name: str, home: str | None, *, create: bool = False):
    """The lab of array NAME; an array that does not exist is named as an array."""
    from raidlab.errors import LabError
    from raidlab.lab import Lab, check_lab_name, labs_dir

    check_lab_name(name)
    try:
        return Lab(name, home=home, create=create)
    except LabError:
        if create:
            raise
        raise UsageError(f"no array named {name!r} in {labs_dir(home)}",
                         hint="`raidlab list` shows the arrays; `raidlab create` makes one") from None


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NeedsRootError(what)


def _parse_options(pairs: tuple[str, ...]) -> dict:
    """-o KEY=VALUE pairs -> architecture options; a value is JSON if it reads as JSON (a
    number, true, a list, which becomes a tuple), else the string itself."""
    options = {}
    for key, value in parse_key_values(pairs, example="layout=n2").items():
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
        if isinstance(options[key], list):
            options[key] = tuple(options[key])
    return options


def _validate(arch: str, disks: int, disk_size: int, chunk: int, options: dict, runner: str,
              disk_model: str = "none", partitions: str | None = None) -> None:
    """Refuse an impossible configuration before anything is started."""
    from raidlab import archs

    archs.validate(arch, disks, disk_size, chunk, options, runner, disk_model=disk_model, partitions=partitions)


def _members(disks: int | None, disk_size: str | None, disk_model: str, partitions: str | None
             ) -> tuple[int, int]:
    """(--disks, member bytes): as given, or from --partitions (the partitions listed, the
    catalog's partition size); a --disk-size that contradicts the partitions is refused."""
    if partitions is None:
        if disks is None:
            raise UsageError("--disks is required", hint="give the number of member disks, or --partitions")
        return disks, parse_size(disk_size or "256M", "--disk-size")
    from raidlab.disks import partitions as parts

    where = parts.layout(partitions, disk_model, disks)
    if disk_size is not None and parse_size(disk_size, "--disk-size") != where.member_bytes:
        raise UsageError(f"--disk-size {disk_size} contradicts --partitions: {disk_model}'s partitions hold "
                         f"{where.member_bytes} bytes", hint="leave --disk-size out with --partitions")
    return len(where.members), where.member_bytes


def _warn_if_images_may_not_fit(lab, arch: str, disks: int, size: int, chunk: int, options: dict, disk_model: str,
                                partitions: str | None) -> None:
    """A warning (not a refusal: the images are sparse and may never fill) when the member
    images could grow past the free space where the lab keeps them."""
    import shutil

    from raidlab import archs

    config = archs.Config(arch, disks, size, chunk, dict(options), disk_model, partitions=partitions)
    if partitions:
        from raidlab.disks import partitions as parts

        where = parts.layout(partitions, disk_model, disks)
        written = len(where.members) * where.member_bytes  # only the partitions are ever written
    else:
        plan = archs.get(arch).plan  # md's members are the lab's drives d0..: no plan of their own
        written = sum(drive.size for drive in plan(config, archs.LIVE)) if plan is not None else disks * size
    free = shutil.disk_usage(lab.path).free
    if written > free:
        _err.print(f"[yellow]warning:[/] {lab.name}'s member images may grow to {written / 2**30:.1f} GiB; "
                   f"{lab.path.parent} has {free / 2**30:.1f} GiB free (the images are sparse: only what is "
                   "written takes space)", soft_wrap=True)


def _array_device(lab) -> str | None:
    """The array's block device on this host (its runtime record's), if it runs here."""
    from raidlab.service.spec import RUNTIME_FILE

    try:
        return json.loads((lab.path / RUNTIME_FILE).read_text()).get("device")
    except (OSError, ValueError):
        return None


def _device_of(record: dict) -> str:
    """The array's block device: on the host, or in the lab VM (`--runner vm`)."""
    if record.get("device"):
        return record["device"]
    if record.get("guest_device"):
        return f"{record['guest_device']} (lab VM)"
    return ""


class _LineProgress:
    """Progress when stderr is not a terminal (nohup, CI, a pipe): a timestamped line at each
    tenth of the work, as `raidlab run` does, instead of a bar nobody sees redrawn."""

    def __init__(self) -> None:
        self.description = ""
        self.next_tenth = 0

    def __enter__(self) -> "_LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def add_task(self, description: str, total=None) -> int:
        self.description = description
        return 0

    def update(self, _task: int, completed: int, total: int) -> None:
        import time

        if not total:
            return
        tenth = completed * 10 // total
        if tenth >= self.next_tenth:
            self.next_tenth = tenth + 1
            _err.print(f"{time.strftime('%H:%M:%S')} {self.description}: {completed >> 20} of {total >> 20} MiB "
                       f"({tenth * 10}%)", soft_wrap=True)


def _progress():
    """A progress bar on a terminal, lines otherwise (_LineProgress)."""
    if not _err.is_terminal:
        return _LineProgress()
    return Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(binary_units=True),
                    TimeRemainingColumn(), console=_err, transient=False)


class _ProgressOnFirstReport:
    """A progress display that appears only when the daemon reports progress, so a refusal
    (an operation that cannot be done) is one line with no bar drawn before it."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.display = None
        self.task = None

    def __enter__(self) -> "_ProgressOnFirstReport":
        return self

    def __call__(self, done: int, total: int) -> None:
        if self.display is None:
            self.display = _progress()
            self.display.__enter__()
            self.task = self.display.add_task(self.description, total=None)
        self.display.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.display is not None:
            self.display.__exit__(*exc)


def _status_updates(name: str, status):
    """The daemon's status lines: into the spinner on a terminal, a timestamped line each
    otherwise."""
    import time

    if _err.is_terminal:
        return lambda m: status.update(f"{name}: {m}")
    return lambda m: _err.print(f"{time.strftime('%H:%M:%S')} {name}: {m}", soft_wrap=True)


class ListsWhatCreateBuilds(ListsArchitectures):
    """`raidlab create --help` ends with the architectures `create` builds: those of a live
    runner (native or the lab VM), not those that run in virtual time only."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from raidlab import archs as registry

        built = [a for a in registry.REGISTRY.values() if {"native", "vm"} & set(a.runners)]
        width = max(len(a.name) for a in built)
        self.epilog = ("Architectures (options of one: raidlab archs NAME):\n\n\b\n"
                       + "\n".join(f"{a.name:<{width}}  {a.summary}" for a in built))
        click.Command.format_epilog(self, ctx, formatter)


@click.command(cls=ListsWhatCreateBuilds)
@click.argument("name")
@click.option("--arch", required=True, help="architecture id (listed below)")
@click.option("--disks", type=click.IntRange(1, 64), default=None,
              help="number of member disks (with --partitions: the partitions listed)")
@click.option("--disk-model", default="none", show_default=True,
              help="catalog model (raidlab disk models) of every member, or one per member: m0,m1,...")
@click.option("--disk-size", default=None, help="size of each member, e.g. 256M, 1G  [default: 256M; with "
              "--partitions: the partition's]")
@click.option("--partitions", default=None, metavar="LIST",
              help="members are partitions of whole drives of --disk-model, in the SA-RAID paper's notation: "
                   "b8-c1-d1-e1 (drive letter, partition number; one letter = one drive) or 8-1-1-1 "
                   "(a drive per member); the catalog's partition table says where each lies")
@click.option("--bus", default=None, metavar="RATE[,MODE]",
              help="one bus every drive shares: RATE MB/s or 'shared' (the model's own bus rate); MODE overlap "
                   "(default) or serial")
@click.option("--write-cache", type=click.Choice(["model", "on", "off"]), default="model", show_default=True,
              help="every drive's write cache (members, cache disks, md's drives): each model's default, or on "
                   "or off for all")
@click.option("--flushes", type=click.Choice(["honoured", "dropped"]), default="honoured", show_default=True,
              help="what becomes of the host's flushes and FUA writes at every drive: honoured (today's hosts) "
                   "or dropped (a host that sends none, as the papers' Linux 2.0 did)")
@click.option("--power-loss", is_flag=True,
              help="the drives' write caches are volatile: each drive logs what its cache holds, so "
                   "`raidlab power-cut` can cut the power (raidlab.disks.volatile)")
@click.option("--span", type=click.Choice(["full", "start"]), default=None,
              help="where every drive's image lies on the modelled drive: spread over its whole stroke (full, "
                   "the default) or its first bytes (start: a partition at the start, as md's smallest member)")
@click.option("--chunk", default="512K", show_default=True, help="chunk / stripe unit (md default 512K)")
@click.option("--discipline", type=click.Choice(["fifo", "sstf", "scan"]), default="fifo", show_default=True)
@click.option("-o", "--option", "options", multiple=True, help="architecture option KEY=VALUE")
@click.option("--runner", type=click.Choice(["native", "vm"]), default="native", show_default=True,
              help="where the block layer and workloads run: this kernel, or the lab VM")
@click.option("--cluster", default=None, metavar="CLUSTER",
              help="build an engine layout over every disk of this cluster (raidlab cluster up), in node order, "
                   "as --node reaches them: its own disks locally, the others' over NBD (docs/cluster.md)")
@click.option("--node", type=int, default=None, help="with --cluster: the node the array runs on  [default: 0]")
@click.option("--join", "joins", default=None, metavar="ARRAY",
              help="with --cluster and --node: another instance of ARRAY (created over the cluster) on node "
                   "--node, for a client there; it never writes ARRAY's metadata (docs/cluster.md)")
@click.option("--home", envvar="RAIDLAB_HOME", help="where labs live (default ~/.local/state/raidlab)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def create(name, arch, disks, disk_model, disk_size, partitions, bus, write_cache, flushes, power_loss, span, chunk,
           discipline, options, runner, cluster, node, joins, home, as_json):
    """Create engine array NAME and print its block device."""
    from raidlab.disks import catalog
    from raidlab.service.spec import ArraySpec
    from raidlab.export.serve import check_live_prerequisites

    _refuse_a_cluster_name(name, home)
    if power_loss and (joins is not None or cluster is not None):
        raise UsageError("--power-loss is for an array over the lab's own drives, not a cluster's",
                         hint="leave out --cluster, or --power-loss")
    if joins is not None:
        if cluster is None or node is None:
            raise UsageError("--join needs --cluster and --node", hint="name the cluster and the client's node")
        _join_over_cluster(name, arch, joins, cluster, node, home, as_json)
        return
    if cluster is not None:
        _create_over_cluster(name, arch, cluster, 0 if node is None else node, chunk, options, home, as_json)
        return
    if node is not None:
        raise UsageError("--node needs --cluster", hint="name the cluster the array runs on")
    chunk_bytes = parse_size(chunk, "--chunk")
    disks, size = _members(disks, disk_size, disk_model, partitions)
    if bus is not None:
        from raidlab.disks.bus import parse_bus

        parse_bus(bus, catalog.member_models(disk_model, disks))
    opts = _parse_options(options)
    try:
        catalog.member_models(disk_model, disks)
    except UnknownModelError:
        raise
    except UsageError as exc:  # a list of the wrong length
        raise UsageError(f"--disk-model: {exc.message}", hint=exc.hint) from None
    _validate(arch, disks, size, chunk_bytes, opts, runner, disk_model, partitions)
    check_live_prerequisites("raidlab create")
    lab = _new_lab(name, home)
    _warn_if_images_may_not_fit(lab, arch, disks, size, chunk_bytes, opts, disk_model, partitions)
    _start_new(lab, ArraySpec(name, arch, disks, disk_model, size, chunk_bytes, discipline, opts, runner,
                              partitions=partitions, bus=bus, write_cache=write_cache, span=span,
                              flushes=flushes, power_loss=power_loss), home, as_json)


def _new_lab(name: str, home: str | None):
    """The lab directory of a new array NAME; refused if an array of that name exists."""
    from raidlab.service.spec import SPEC_FILE

    lab = _lab(name, home, create=True)
    if (lab.path / SPEC_FILE).exists():
        raise UsageError(f"array {name!r} already exists in {lab.path}",
                         hint=f"use `raidlab assemble {name}`, or `raidlab destroy {name}` first")
    return lab


def _start_new(lab, spec: ArraySpec, home: str | None, as_json: bool, mode: str = "create") -> None:
    """Save `spec` in the new `lab`, start its daemon in `mode` (create, or join) and print the
    device; if the start fails or is interrupted, everything the lab got is released."""
    from raidlab.service import control

    spec.save(lab.path)
    try:
        with _err.status(f"{'creating' if mode == 'create' else 'joining'} {spec.name}") as status:
            ready = control.start_daemon(lab, mode, home=home, on_status=_status_updates(spec.name, status))
    except BaseException:
        with deferred_signals():  # a second Ctrl-C or SIGTERM must not cut the release short
            control.release_leftovers(lab)
            control.remove_lab(lab, keep_images=False)
        raise
    _print_ready(ready, as_json)


# Flags that describe the lab's own member disks; over a cluster its disks are what they are.
_MEMBER_FLAGS = ("disks", "disk_model", "disk_size", "partitions", "bus", "write_cache", "flushes", "span",
                 "discipline", "runner")


def _refuse_a_cluster_name(name: str, home: str | None) -> None:
    from raidlab.cluster.plan import CLUSTER_FILE
    from raidlab.lab import check_lab_name, labs_dir

    check_lab_name(name)
    if (labs_dir(home) / name / CLUSTER_FILE).exists():
        raise UsageError(f"{name!r} is the name of a cluster", hint="choose another name for the array")


def _create_over_cluster(name, arch, cluster, node, chunk, options, home, as_json) -> None:
    """`raidlab create NAME --cluster C [--node K]`: an engine layout over every disk of C, as
    node K reaches them (raidlab.cluster.members); refused in one line before anything
    starts when C is not up, K is not one of its nodes, the layout cannot take C's number of
    disks, or another array uses C's disks."""
    from raidlab import archs
    from raidlab.cluster.control import arrays_over
    from raidlab.cluster.join import joined_to
    from raidlab.cluster.members import resolve
    from raidlab.export.serve import check_live_prerequisites
    from raidlab.service.spec import ArraySpec
    from raidlab.tools.base import require

    context = click.get_current_context()
    for param in _MEMBER_FLAGS:
        if context.get_parameter_source(param) not in (click.core.ParameterSource.DEFAULT, None):
            flag = "--" + param.replace("_", "-")
            raise UsageError(f"{flag} does not go with --cluster: the members are cluster {cluster}'s disks",
                             hint=f"leave {flag} out; `raidlab cluster up` sets the disks")
    family = archs.get(arch).family
    if family != "engine":
        raise UsageError(f"--cluster builds the engine's layouts; {arch} is of the {family} family",
                         hint="use raidx, raid10, chained, raid5, raid0 or another engine layout")
    chunk_bytes = parse_size(chunk, "--chunk")
    opts = _parse_options(options)
    spec, members = resolve(cluster, node, home=home)
    models = [member["model"] for member in members]
    disk_model = models[0] if len(set(models)) == 1 else ",".join(models)
    try:
        archs.validate(arch, len(members), spec.disk_size, chunk_bytes, opts, "native", disk_model=disk_model)
    except UsageError as exc:
        raise UsageError(f"{arch} over cluster {cluster}'s {len(members)} disks: {exc.message}",
                         hint=f"cluster {cluster} has {spec.nodes} node(s) of {spec.disks_per_node} disk(s); "
                              "bring up a cluster with the disks it needs") from None
    check_live_prerequisites("raidlab create")
    require("nbdfuse")
    require("nsenter")
    others = [other for other, _running in arrays_over(cluster, home=home) if other != name]
    others = [other for other in others if joined_to(other, home) is None]
    if others:
        raise UsageError(f"cluster {cluster}'s disks hold array {others[0]!r} already; two arrays over one "
                         "cluster's disks would overwrite each other", hint=f"`raidlab destroy {others[0]}` first")
    lab = _new_lab(name, home)
    _start_new(lab, ArraySpec(name, arch, len(members), disk_model, spec.disk_size, chunk_bytes, options=opts,
                              cluster=cluster, node=node, members=members), home, as_json)


def _join_over_cluster(name, arch, joins, cluster, node, home, as_json) -> None:
    """`raidlab create NAME --cluster C --node K --join ARRAY`: another instance of ARRAY on
    node K (raidlab.cluster.join), refused in one line when that makes no sense."""
    from raidlab.cluster.join import plan_join
    from raidlab.export.serve import check_live_prerequisites
    from raidlab.tools.base import require

    context = click.get_current_context()
    for param in (*_MEMBER_FLAGS, "chunk", "options"):
        if context.get_parameter_source(param) not in (click.core.ParameterSource.DEFAULT, None):
            flag = "-o" if param == "options" else "--" + param.replace("_", "-")
            raise UsageError(f"{flag} does not go with --join: the instance is {joins}'s",
                             hint=f"leave {flag} out")
    spec = plan_join(name, arch, joins, cluster, node, home)
    check_live_prerequisites("raidlab create")
    require("nbdfuse")
    require("nsenter")
    lab = _new_lab(name, home)
    _start_new(lab, spec, home, as_json, mode="join")


def _check_cluster_unchanged(spec, home: str | None) -> None:
    """An array over a cluster assembles only while the cluster is up and its disks are still
    where the array's spec says (the same nodes, exports, addresses and sizes)."""
    from raidlab.cluster.members import resolve

    _cluster, members = resolve(spec.cluster, spec.node, home=home)
    if members != spec.members:
        raise UsageError(f"cluster {spec.cluster}'s disks are not the ones {spec.name} was created over",
                         hint=f"bring {spec.cluster} up as it was (`raidlab cluster up`), or destroy {spec.name}")


@click.command()
@click.argument("name")
@click.option("--no-resync", is_flag=True,
              help="after an unclean stop, do not resync (leave inconsistent stripes for `raidlab check` "
                   "to find, as md's sync_action frozen)")
@click.option("--force", is_flag=True,
              help="start a parity array that was not stopped cleanly with a member failed (refused "
                   "otherwise: its parity may not match its data), as mdadm --assemble --force")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True)
def assemble(name, no_resync, force, home, as_json):
    """Bring array NAME back from its member images (refuses foreign or misordered members).
    An array of the engine's redundant layouts that was not stopped cleanly is resynced in
    the background while it serves, as md does; one that is also degraded is not started
    without --force, as md's is not."""
    from raidlab.service import control
    from raidlab.service.spec import FORCE_ENV, NO_RESYNC_ENV, SPEC_FILE

    _need_root("raidlab assemble")
    lab = _lab(name, home)
    if not (lab.path / SPEC_FILE).exists():
        raise UsageError(f"no array {name!r} in {lab.path}", hint="see `raidlab list`")
    if lab.in_use():
        raise UsageError(f"array {name!r} is already running", hint=f"see `raidlab status {name}`")
    from raidlab.service.spec import ArraySpec

    spec = ArraySpec.load(lab.path)
    if spec.cluster is not None:
        _check_cluster_unchanged(spec, home)
    for line in control.release_leftovers(lab):
        _err.print(f"released leftover of a killed run: {line}")
    mode = "join" if spec.joins else "assemble"  # an instance of another array joins it again
    with _err.status(f"assembling {name}") as status:
        env = {**({NO_RESYNC_ENV: "1"} if no_resync else {}), **({FORCE_ENV: "1"} if force else {})}
        ready = control.start_daemon(lab, mode, home=home, on_status=_status_updates(name, status),
                                     env=env or None)
    _print_ready(ready, as_json)


def _print_ready(ready: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(ready))
        return
    _err.print(f"{ready['arch']}: {ready['capacity'] / 2**20:.1f} MiB, {ready['state']}, daemon pid {ready['pid']}"
               + (f", in the lab VM as {ready['guest_device']}" if ready.get("guest_device") else "")
               + (", resyncing after an unclean stop" if ready.get("resync") else ""))
    click.echo(ready["device"] or ready.get("guest_device") or ready.get("volume"))


@click.command(name="list")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(home, as_json):
    """List engine arrays and their state."""
    from raidlab.service import control

    arrays = control.list_arrays(home)
    if as_json:
        click.echo(json.dumps(arrays, indent=2))
        return
    if not arrays:
        _err.print("no arrays (create one with `raidlab create`)")
        return
    table = Table()
    for col in ("name", "arch", "disks", "model", "size", "chunk", "status", "device"):
        table.add_column(col)
    for a in arrays:
        model = (f"cluster {a['cluster']}, node {a['node']}" if a.get("cluster")
                 else a["disk_model"].replace(",", ", "))
        table.add_row(a["name"], a["arch"], str(a["disks"]), model,
                      f"{a['disk_size'] >> 20} MiB",
                      f"{a['chunk'] >> 10} KiB", a["status"], _device_of(a))
    _out.print(table)


@click.command()
@click.argument("name")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True)
def status(name, home, as_json):
    """Geometry, state and per-member statistics of array NAME."""
    from raidlab.service import control

    result = control.request(_lab(name, home), "status")
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    if result.get("kind") != "engine":
        # Other families describe themselves: a title and lines of text, then tables
        # ({"title", "columns", "rows"}).
        _out.print(f"[bold]{name}[/]: {result['spec']['arch']} over {_over(result.get('member_models', []))}, "
                   f"device {_device_of(result)}")
        for line in result.get("report", []):
            _out.print(line, soft_wrap=True)
        for spec in result.get("tables", []):
            table = Table(title=spec.get("title"))
            for col in spec["columns"]:
                table.add_column(str(col), overflow="fold")
            for row in spec["rows"]:
                table.add_row(*(str(v) for v in row))
            _out.print(table)
        return
    stats = result["statistics"]
    geo = result["geometry"]
    if result.get("cluster"):
        _print_cluster_status(name, result)
        return
    _out.print(f"[bold]{name}[/]: {geo['arch']} over {_over([m.get('model', '?') for m in stats['members']])}, "
               f"chunk {geo['chunk_bytes'] >> 10} KiB, capacity {stats['capacity'] / 2**20:.1f} MiB, "
               f"device {_device_of(result)}, state [bold]{stats['state']}[/]"
               + (" (rebuilding)" if result["rebuilding"] else "")
               + (" (resyncing after an unclean stop)" if result.get("resyncing") else ""))
    _out.print(f"redundancy: {_redundancy(result)}; superblock generation {result['generation']}", soft_wrap=True)
    _out.print(f"array: {stats['reads']} reads ({stats['bytes_read'] >> 10} KiB), {stats['writes']} writes "
               f"({stats['bytes_written'] >> 10} KiB) -> member reads {stats['member_reads']}, member writes "
               f"{stats['member_writes']}; full-stripe {stats['full_stripe_writes']}, RMW {stats['rmw_stripes']}, "
               f"RCW {stats['rcw_stripes']}, degraded reads {stats['degraded_reads']}")
    journal = stats.get("journal")
    if journal:
        _out.print(f"write journal (drive d{len(stats['members'])}): "
                   + (f"[red]failed[/] ({journal['failed']}), {journal['writes_refused']} writes refused; "
                      if journal.get("failed") else "")
                   + f"{journal['records']} records ({journal['journal_bytes'] >> 10} KiB), "
                   f"{journal['checkpoints']} checkpoints, {journal['restarts']} restarts, "
                   f"{journal['replayed_records']} replayed at assembly")
    members = stats["members"]
    models = {m.get("model") for m in members}
    on_drives = any("disk" in m for m in members)  # members are partitions of drives
    volatile = any("volatile_cache" in m for m in members)  # created with --power-loss
    columns = ["#", *(["model"] if len(models) > 1 else []), *(["on drive"] if on_drives else []),
               "state", "reads", "writes", "KiB read", "KiB written", "busy s", "queue max",
               *(["unflushed writes"] if volatile else [])]
    from raidlab.service.hosts.status import write_cache_note

    table = Table(title=f"members ({write_cache_note(members)})" if members else "members")
    for col in columns:
        table.add_column(col, overflow="fold")
    for m in members:
        row = [str(m["index"])]
        if len(models) > 1:
            row.append(m.get("model", ""))
        if on_drives:
            row.append(f"{m['disk'].removeprefix('drive-')}@{m.get('start', 0) >> 20}M" if "disk" in m else "")
        row += ["[red]failed[/]" if m["failed"] else "ok", str(m.get("reads", "")), str(m.get("writes", "")),
                str(m.get("bytes_read", 0) >> 10), str(m.get("bytes_written", 0) >> 10),
                f"{m.get('busy_time', 0):.3f}", str(m.get("max_queue_length", ""))]
        if volatile:
            row.append(str(m.get("volatile_cache", {}).get("pending_writes", "")))
        table.add_row(*row)
    _out.print(table)
    for line in _arch_lines(result):
        _out.print(line, soft_wrap=True)


def _redundancy(result: dict) -> str:
    """What the array survives in its state now (the daemon's words), else the healthy rule."""
    redundancy = result["redundancy"]
    return redundancy.get("now") or redundancy.get("rule") or "none"


def _print_cluster_status(name: str, result: dict) -> None:
    """An array over a cluster: which node it runs on, and for each member the node and
    disk it is and whether that node reaches it locally or over NBD (with the disk's URI)."""
    stats, geo, cluster = result["statistics"], result["geometry"], result["cluster"]
    members = stats["members"]
    remote = sum(1 for m in members if m.get("where") == "remote")
    joined = f" (another instance of {cluster['joins']})" if cluster.get("joins") else ""
    _out.print(f"[bold]{name}[/]{joined}: {geo['arch']} over cluster {cluster['name']} from node {cluster['node']} "
               f"({len(members) - remote} local, {remote} remote members, {_over([m.get('model', '?') for m in members])}), "
               f"chunk {geo['chunk_bytes'] >> 10} KiB, capacity {stats['capacity'] / 2**20:.1f} MiB, "
               f"device {_device_of(result)}, state [bold]{stats['state']}[/]"
               + (" (rebuilding)" if result["rebuilding"] else ""), soft_wrap=True)
    _out.print(f"redundancy: {_redundancy(result)}; superblock generation {result['generation']}; "
               f"member errors {stats['member_errors']}, degraded reads {stats['degraded_reads']}, "
               f"degraded writes {stats['degraded_writes']}", soft_wrap=True)
    table = Table(title="members (each disk's model runs on its node; the network's time is real)")
    for col in ("#", "disk", "reached", "NBD URI", "state", "reads", "writes", "KiB rd", "KiB wr", "errors"):
        table.add_column(col, overflow="fold", no_wrap=col in ("disk", "NBD URI"))
    for m in members:
        where = m.get("where", "")
        table.add_row(str(m["index"]), f"node{m.get('node', '?')}/{m.get('export', '')}", where,
                      m.get("uri", "") if where == "remote" else "-",
                      "[red]failed[/]" if m["failed"] else "ok", str(m.get("reads", "")), str(m.get("writes", "")),
                      str(m.get("bytes_read", 0) >> 10), str(m.get("bytes_written", 0) >> 10),
                      str(m.get("errors", 0)) + (f" ({m['timeouts']} timed out)" if m.get("timeouts") else ""))
    _out.print(table)
    for m in members:
        if m.get("where") == "local":
            _out.print(f"member {m['index']} is node {m['node']}'s own {m['export']}, reached without the network "
                       f"as {m.get('path', '?')}", soft_wrap=True)
    for line in _arch_lines(result):
        _out.print(line, soft_wrap=True)


def _arch_lines(result: dict) -> list[str]:
    """What an architecture keeps of its own, in words: its layout's creation record (SA-RAID's
    measured bandwidths, the layout's `state_lines`), the virtual device array, saz's
    bandwidth curves, RAID-x's pending images."""
    from raidlab.engine.layouts import LAYOUTS

    geo, state, stats = result["geometry"], result.get("arch_state") or {}, result["statistics"]
    layout = LAYOUTS.get(geo.get("arch", ""))
    lines = layout.state_lines(state) if layout is not None else []
    vda = geo.get("virtual_device_array")
    if vda:
        shares = ", ".join(f"d{d} {vda.count(d)}" for d in range(geo["n_disks"]))
        lines.append(f"virtual device array: entries per member {shares}; in order: "
                     + " ".join(str(d) for d in vda))
    curves = geo.get("bandwidth_curves")
    if curves:
        lines.append("bandwidth along each member (MB/s): " + "; ".join(
            f"d{d} " + " ".join(f"{x / 1e6:.1f}" for x in curve) for d, curve in enumerate(curves)))
    buffer = stats.get("image_buffer")
    if buffer:
        lines.append(f"images pending: {buffer.get('pending', 0)} ({buffer.get('pending_bytes', 0) >> 10} KiB)"
                     + (", writing through" if buffer.get("write_through") else ""))
    return lines


def _over(models: list[str]) -> str:
    """'4 x ibm-dnes-309170', or the members' models in order when they differ."""
    if not models:
        return "?"
    return f"{len(models)} x {models[0]}" if len(set(models)) == 1 else ", ".join(models)


@click.command()
@click.argument("name")
@click.option("--keep-images", is_flag=True, help="keep the member images (for `raidlab assemble`)")
@click.option("--home", envvar="RAIDLAB_HOME")
def destroy(name, keep_images, home):
    """Stop array NAME, release its loop device and mount, delete its images unless kept."""
    from raidlab.service import control
    from raidlab.service.spec import SPEC_FILE

    lab = _lab(name, home)  # an array that does not exist is said so first, root or not
    _need_root("raidlab destroy")
    if not (lab.path / SPEC_FILE).exists() and not lab.resources():
        raise UsageError(f"no array {name!r} in {lab.path}", hint="see `raidlab list`")
    from raidlab.tools.mount import current_mounts, mounts_of_source

    over = _cluster_of(lab)
    if over:
        from raidlab.cluster.join import instances_of

        running = [other for other, is_running in instances_of(name, over, home) if is_running]
        if running:
            raise UsageError(f"{running[0]!r} is another instance of {name!r} and runs",
                             hint=f"`raidlab destroy {running[0]}` first")
    device = _array_device(lab)
    mounted = [entry.mount_point for entry in mounts_of_source(device)] if device else []
    with _err.status(f"stopping {name}"):
        stopped = control.stop_daemon(lab)
    for line in control.release_leftovers(lab):
        _err.print(f"released leftover of a killed run: {line}")
    still = {entry.mount_point for entry in current_mounts()}
    for point in mounted:
        if point not in still:
            _err.print(f"{name}: unmounted {point} (a file system on {device}, the array's device)")
    over_cluster = _cluster_of(lab)
    with deferred_signals():  # a Ctrl-C or SIGTERM now must not leave half the lab's files
        control.remove_lab(lab, keep_images=keep_images)
    if over_cluster:
        _err.print(f"{name}: {'stopped' if stopped else 'was not running'}; its members were cluster "
                   f"{over_cluster}'s disks, which keep what it wrote", soft_wrap=True)
        return
    _err.print(f"{name}: {'stopped' if stopped else 'was not running'}; "
               + ("images kept in " + str(lab.images_dir) if keep_images else "images removed"))


def _cluster_of(lab) -> str | None:
    from raidlab.service.spec import SPEC_FILE, ArraySpec

    if not (lab.path / SPEC_FILE).exists():
        return None
    try:
        return ArraySpec.load(lab.path).cluster
    except (UsageError, ValueError, TypeError):
        return None


@click.command()
@click.argument("name")
@click.option("--disk", "disk", type=int, required=True, help="member index")
@click.option("--force", is_flag=True, help="inject even if the array cannot survive it")
@click.option("--mode", type=click.Choice(["vanish", "read-eio", "write-eio", "slow"]), default="vanish",
              show_default=True,
              help="vanish: the member is gone and the array told; read-eio / write-eio: its reads / writes "
                   "fail from now on; slow: it answers 100x slower (the array finds the last three itself)")
@click.option("--home", envvar="RAIDLAB_HOME")
def fail(name, disk, force, mode, home):
    """Make member DISK of NAME fail (it returns EIO from now on), or inject a partial fault."""
    from raidlab.service import control

    result = control.request(_lab(name, home), "fail", disk=disk, force=force, mode=mode)
    if "journal" in result:
        _err.print(f"{name}: the write journal's drive {disk} "
                   + ("failed: writes are refused from now on, reads go on" if mode == "vanish"
                      else f"now has fault {mode}: the journal fails at its next write")
                   + f"; state {result['state']}")
        return
    if mode != "vanish":
        _err.print(f"{name}: member {disk} now has fault {mode}; state {result['state']}, "
                   f"failed members {result['failed_members']}")
        return
    _err.print(f"{name}: member {disk} failed; state {result['state']}, failed members {result['failed_members']}")


@click.command(name="power-cut")
@click.argument("name")
@click.option("--mode", type=click.Choice(["all", "model", "random"]), default="all", show_default=True,
              help="what the drives lose: every write not flushed, what their model had not written back, "
                   "or a random subset (each drive apart)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of --mode random")
@click.option("--only", default=None, metavar="dK,...",
              help="only these drives lose their caches (the others had written theirs back)")
@click.option("--home", envvar="RAIDLAB_HOME")
def power_cut(name, mode, seed, only, home):
    """Cut the power of array NAME: its daemon dies as in a crash, and every drive's image
    loses what the drive's volatile write cache held (an array created with --power-loss).
    Bring it back with `raidlab assemble NAME`."""
    from raidlab.disks.volatile import log_path, power_cut_images
    from raidlab.service import control
    from raidlab.service.spec import SPEC_FILE, ArraySpec

    lab = _lab(name, home)
    _need_root("raidlab power-cut")
    if not (lab.path / SPEC_FILE).exists():
        raise UsageError(f"no array {name!r} in {lab.path}", hint="see `raidlab list`")
    if not ArraySpec.load(lab.path).power_loss:
        raise UsageError(f"{name}'s drives keep no record of their write caches",
                         hint="create the array with --power-loss")
    images = sorted(lab.images_dir.glob("*.img"))
    if only is not None:
        wanted = {f"{label.strip()}.img" for label in only.split(",") if label.strip()}
        unknown = sorted(wanted - {image.name for image in images})
        if unknown:
            raise UsageError(f"--only: {name} has no drive {unknown[0][:-4]}",
                             hint=f"its drives: {', '.join(image.name[:-4] for image in images)}")
    killed = control.kill_daemon(lab)
    for line in control.release_leftovers(lab):
        _err.print(f"released: {line}")
    cut = [image for image in images if only is None or image.name in wanted]
    for image in images:
        if image not in cut:
            log_path(image).unlink(missing_ok=True)  # its cache was written back: it keeps everything
    report = power_cut_images(cut, mode, seed)
    for image in cut:
        r = report.get(image.name, {"writes_lost": 0, "bytes_lost": 0, "writes_kept": 0})
        _err.print(f"{image.name[:-4]}: lost {r['writes_lost']} write(s), {r['bytes_lost']} bytes; "
                   f"kept {r['writes_kept']} unflushed")
    _err.print(f"{name}: power cut ({mode}){'' if killed else ', its daemon was not running'}; "
               f"`raidlab assemble {name}` brings it back")


@click.command()
@click.argument("name")
@click.option("--disk", "disk", type=int, required=True, help="member index")
@click.option("--home", envvar="RAIDLAB_HOME")
def replace(name, disk, home):
    """Rebuild failed member DISK of NAME onto a fresh image (with progress)."""
    from raidlab.service import control

    with _ProgressOnFirstReport(f"rebuilding member {disk}") as progress:
        result = control.request(_lab(name, home), "replace", disk=disk, on_progress=progress)
    done = (f"rebuilt ({result['rebuilt_bytes'] >> 20} MiB)" if "rebuilt_bytes" in result
            else f"refilled from its mirror ({result['copied_bytes'] >> 20} MiB)")
    _err.print(f"{name}: member {disk} {done}; state {result['state']}")


@click.command()
@click.argument("name")
@click.option("--repair", is_flag=True,
              help="when mismatches are found, resync (rewrite every stripe from its data: parity "
                   "recomputed, copies made equal, as md's repair) and check again")
@click.option("--home", envvar="RAIDLAB_HOME")
@click.option("--json", "as_json", is_flag=True)
def check(name, repair, home, as_json):
    """Scrub NAME: compare mirrors and parity; report mismatches (exit 1 if any are left)."""
    from raidlab.service import control

    with _ProgressOnFirstReport("checking") as progress:
        result = control.request(_lab(name, home), "check", on_progress=progress, repair=repair)
    if as_json:
        click.echo(json.dumps(result))
    else:
        if "found" in result:
            _err.print(f"{name}: {len(result['found'])} mismatching ranges found; resync rewrote "
                       f"{result['repaired_bytes'] >> 20} MiB")
        found = result["mismatches"]
        _err.print(f"{name}: checked {result['checked_bytes'] >> 20} MiB, "
                   + ("no mismatch" if not found else f"{len(found)} mismatching ranges"))
        for m in found[:20]:
            _err.print(f"  member {m['disk']} bytes {m['offset']}..{m['offset'] + m['length']}")
    return 1 if result["mismatches"] else 0


def register(cli: click.Group) -> None:
    for command in (create, assemble, list_cmd, status, destroy, fail, power_cut, replace, check):
        cli.add_command(command)
