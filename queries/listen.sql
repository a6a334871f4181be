-- Wake-ups for idle agents (submitted jobs) and owners (cancel requests).
LISTEN tether_jobs; LISTEN tether_cancel;
