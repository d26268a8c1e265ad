"""The one model of a candidate's C source that every static analysis reads (L0 static and
sync checks, the design classifier). Plain text processing: no preprocessor, no compiler.

- `model`: `CandidateSource`, a candidate read once: lexed text, EVOLVE regions, the design line,
  and two `CodeView`s (the whole file; the EVOLVE blocks only) with everything below, computed
  on first use.
- `regions`: EVOLVE regions, the frozen hash, the `// cuco-design:` line.
- `lexer`: comments and literals blanked with offsets kept, bracket matching, line/column lookup.
- `arguments`: argument lists split on their top-level commas.
- `expressions`: integer constant expressions.
- `constants`: `constexpr`/`const` integers, `#define`s, `dim3` extents.
- `functions`: function definitions (kernel, device, host), parameters, bodies, enclosing one.
- `launches`: kernel launches (`<<<...>>>` and `cudaLaunchKernel`), configuration and arguments.
- `calls`: calls, with the namespace before the name, the object of a member call, the template
  and call arguments.
- `declarations`: names declared with a type (variables, members, parameters), namespace
  aliases and using-directives.
- `statements`: statement ends, loops with trip counts, `if`/`else`.
- `assignments`: assignments, compound assignments and increments, and names derived through them.
- `reach`: from a function to the kernels that run it and their launches, and the launch a line
  belongs to.
"""
