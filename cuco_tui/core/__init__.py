"""The ground floor: the types every room shares (the candidate record and its ids, the
cascade's result with its diagnostics and levels, the workload manifest type, the error a
user's input causes). Nothing here imports another room of cuco_tui."""
