"""RQ job entry points and the member agent loop; cheap to import (litellm is loaded lazily)."""
