"""The engine over any compiled program: opening a model the one way (`opener`), the program
protocol every target implements (`program`), the request checks (`request`), the one
generation loop (`generate`), the text API (`engine`) and text in and out (`text`: tokenizers,
chat templates, the one text emitter), serving (`serve`) and tensor parallelism (`tp`); and
the command bodies the CLI calls: `textgen` (run, generate), `chat`, `call`, `perplexity`,
`bench`, `serve.launch`, `tokens` (tokenize). See docs/runtime.md."""
