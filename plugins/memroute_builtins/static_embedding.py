"""Static (model2vec potion-base-8M) embedding source (issue 3). Not implemented yet: registers nothing."""
