"""The manual's generated parts: `reference` renders them, `hooks` (mkdocs.yml `hooks:`) puts them in."""
