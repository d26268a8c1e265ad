"""`classify`: read a candidate's EVOLVE blocks, dimension by dimension, into `Evidence`."""

from __future__ import annotations

from cuco_tui.design.classify import backend, chunk, comm_sms, issuer, placement, streams, sync
from cuco_tui.design.classify.evidence import Evidence
from cuco_tui.design.classify.kernels import read_launches
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.space import DesignError, DesignPoint, parse_design
from cuco_tui.source.model import CandidateSource


def classify(source: str | CandidateSource) -> Evidence:
    """Read a candidate's EVOLVE blocks and record the evidence for each design dimension."""
    src = CandidateSource.of(source)
    r = Reading(src)
    # The sites, in the order the readers record them (ties on a line keep this order).
    backend.read_api_calls(r)
    located = read_launches(r)
    launches = [launch for _, launch in located]
    backend.read_peer_copies(r)
    backend.read_runtime_calls(r)
    sync.read_wait_sites(r)
    backends, data_backends = backend.read(r)
    n_streams, exact = streams.count(r)
    compute = streams.compute_streams(r, launches)
    comm = streams.comm_streams(r, launches)
    chunking, chunk_count = chunk.read(r, chunk.host_transfers(r, located))
    flag_waits, chunk_waits, barriers = sync.read(r, located)
    who, coop = issuer.read(r, launches, data_backends)
    declared, error = _declared(src.design)
    return Evidence(
        sites=r.sites(),
        launches=tuple(launches),
        backends=backends,
        data_backends=data_backends,
        streams=n_streams,
        streams_exact=exact,
        compute_streams=tuple(sorted(compute)),
        comm_streams=tuple(sorted(comm)),
        overlap=placement.read(launches, compute, comm),
        chunking=chunking,
        chunk_count=chunk_count,
        flag_waits=flag_waits,
        chunk_waits=chunk_waits,
        barriers=barriers,
        issuer=who,
        coop=coop,
        comm_sms_hint=comm_sms.read(launches),
        declared=declared,
        declared_pairs=src.design,
        design_error=error,
    )


def _declared(pairs: dict[str, str] | None) -> tuple[DesignPoint | None, str]:
    """The declared point, or None and why it could not be read."""
    if pairs is None:
        return None, "no `// cuco-design:` line with key=value pairs in the first EVOLVE block"
    try:
        return parse_design(pairs), ""
    except DesignError as exc:
        return None, str(exc)
