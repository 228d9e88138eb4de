"""The engine over any compiled program: the program protocol every target implements
(`program`), the request checks (`request`), the one generation loop (`generate`), its progress
and report, and `strata run` (`engine`). See docs/runtime.md."""
