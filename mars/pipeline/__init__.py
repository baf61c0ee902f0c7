"""The pipeline's pieces: config and schema, the experiments' declaration, tracking, offline mirrors."""
