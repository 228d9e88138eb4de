"""What a user meets above the compiler: text in and out (`strata.runtime.text`), and later the
generation loop, sampling parameters, the scheduler and the server."""
