"""A workload from the engineer's own PyTorch program (`cuco workload import FILE.py`).

The program is one Python file: `SHAPES`, `make_inputs(rank, world, *, dims..., dtype, device)` and
`solution(*inputs)`, which runs on every rank under torch.distributed (docs/workloads.md, "Bring
your PyTorch program"). The user's code never runs in the CLI's process but in W `gloo_rank`
processes (gloo_run.GlooRanks), started once per import: in rank 0, `inspect_program` loads it (the
convention, every shape sized on the meta device under a fake process group); then the W ranks run
it on the CPU in float64 under the gloo backend and record one call's aten ops and collectives
(`tracing`). `patterns` reads that trace, `layout` maps a
recognized pattern onto the harness's buffers, `generate` writes the folder's files, `adapter` is
what the written reference.py calls at run time. Only the modules that run inside those processes
import torch, and only when they run: the rest of the tool never needs it."""
