"""RQ job entry points and what a member's attempt needs; cheap to import (litellm loads lazily)."""
