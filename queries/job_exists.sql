SELECT status FROM jobs WHERE id = $1;
