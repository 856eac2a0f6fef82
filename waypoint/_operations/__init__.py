"""Running Waypoint: the dev server, the codec server, deploys and their check, connections."""
