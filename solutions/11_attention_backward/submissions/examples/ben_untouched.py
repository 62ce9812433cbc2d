# A notebook handed in as released: no answer written.
