"""A persistent team seen from outside its turns: the lead agent and how requests and tasks
read to a person."""
