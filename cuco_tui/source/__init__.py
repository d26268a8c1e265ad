"""The one model of a candidate's C source that every static analysis reads: EVOLVE regions
and the frozen hash (`regions`), comments and literals blanked with offsets kept, bracket
matching and line/column lookup (`lexer`)."""
