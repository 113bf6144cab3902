// Empty: the source of rlparity_test_pch, which only builds the test binaries' precompiled header.
