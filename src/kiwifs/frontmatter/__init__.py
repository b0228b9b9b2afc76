"""Reading and editing a markdown file's YAML frontmatter, safely."""
