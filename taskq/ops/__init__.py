"""Operations: read-only views (inspect) and their rendering, dead letters, metrics, and
private Redis servers for development and tests."""
