"""The engine over any compiled program: the program protocol every target implements
(`program`), the request checks (`request`), the one generation loop (`generate`), its progress
and report, `strata run` (`engine`), and text in and out (`text`: tokenizers, chat templates,
streaming detokenization). See docs/runtime.md."""
