"""Program analysis: coverage of one function, mutation testing (mutants, decoys), AST equivalence."""
